//! The smp conduit and its endpoints.
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

/// Default bytes per ring.
pub const DEFAULT_RING_SIZE: usize = 256 << 10;
/// Default largest Medium payload.
pub const DEFAULT_MAX_MEDIUM: usize = 64 << 10;
#[inline(always)]
fn user_word(msg: &OutMsg<'_>) -> u32 {
    record::user_word(msg.handler(), msg.category(), msg.kind(), msg.args().len())
}

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

impl Rx {
    /// Whether a sender made at run time announced a first contact not seen yet.
    #[inline(always)]
    fn contacted(&self) -> bool {
        self.contacts
            .get()
            .load(gex_sync::atomic::Ordering::Acquire)
            != self.seen_contacts
    }

    /// Starts polling every sender slot made at run time that has been opened (its
    /// state word is no longer `UNUSED`) and is not polled yet.
    #[cold]
    #[inline(never)]
    fn rescan(&mut self, c: &Smp) {
        self.seen_contacts = self
            .contacts
            .get()
            .load(gex_sync::atomic::Ordering::Acquire);
        for (li, l) in c.layouts.iter().enumerate() {
            let base = c.g_base[c.ranks[li] as usize];
            for de in l.eps..l.slots {
                let g = base + de;
                if !self.is_active[g]
                    && c.maps[li]
                        .state(l, de)
                        .load(gex_sync::atomic::Ordering::Acquire)
                        != region::UNUSED
                {
                    self.is_active[g] = true;
                    self.active.push(g);
                }
            }
        }
    }
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
pub const ENV_VARS: &[gex_core::config::EnvVar] = &[
    gex_core::config::EnvVar {
        name: "GEX_SMP_RING_SIZE",
        default: "262144",
        doc: "smp conduit: bytes per AM ring (one request and one reply ring per ordered endpoint pair); power of two.",
    },
    gex_core::config::EnvVar {
        name: "GEX_SMP_MAX_MEDIUM",
        default: "65536",
        doc: "smp conduit: largest Medium payload; must fit a ring record.",
    },
    gex_core::config::EnvVar {
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
    const ENV_VARS: &'static [gex_core::config::EnvVar] = ENV_VARS;

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

impl Smp {
    /// Opens the node-local part of a job: rings, doorbells, auxiliary areas and
    /// segments shared by the ranks on this rank's host (`params.layout.host`), mapped
    /// into each of them. Collective over every rank of the job (one bootstrap
    /// exchange and one barrier), also on hosts with a single rank. The endpoints can
    /// only address ranks of this host (see the `NearConduit` implementation).
    pub(crate) fn open_node(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Smp>, Vec<SmpEp>), InitError> {
        let jl = params.layout;
        let n = jl.size() as usize;
        let rank = params.rank as usize;
        let ring_cap = params.config.size("GEX_SMP_RING_SIZE", DEFAULT_RING_SIZE)?;
        if !ring::is_valid_capacity(ring_cap) || ring_cap < region::MIN_RING {
            return Err(InitError::Config(format!(
                "GEX_SMP_RING_SIZE={ring_cap}: must be a power of two between {} and {}",
                region::MIN_RING,
                ring::MAX_CAPACITY
            )));
        }
        let max_medium = params
            .config
            .size("GEX_SMP_MAX_MEDIUM", DEFAULT_MAX_MEDIUM)?;
        let room = ring::max_body(ring_cap) - NP_ARGS_AREA;
        if max_medium > room {
            return Err(InitError::Config(format!(
                "GEX_SMP_MAX_MEDIUM={max_medium} does not fit a {ring_cap}-byte ring (at most {room}); raise GEX_SMP_RING_SIZE"
            )));
        }
        // The ranks of this host, in rank order, and their global EP numbering.
        let overflow = params.config.size("GEX_SMP_OVERFLOW", DEFAULT_OVERFLOW)?;
        let ranks: Vec<u32> = jl.neighbours(params.rank);
        let mut local_of = vec![NOT_LOCAL; n];
        let mut g_base = vec![usize::MAX; n];
        let mut total = 0usize;
        let slots_of = |r: usize| (jl.max_eps[r].max(jl.eps[r])) as usize;
        for (li, &r) in ranks.iter().enumerate() {
            local_of[r as usize] = li as u32;
            g_base[r as usize] = total;
            total += slots_of(r as usize);
        }
        let me = local_of[rank] as usize;
        let my_eps = jl.eps[rank] as usize;
        let mine = Layout::new(
            my_eps,
            slots_of(rank),
            total,
            ring_cap,
            jl.seg_len[rank],
            params.aux_len,
        )
        .ok_or_else(|| InitError::Config("smp region size overflows".into()))?;
        let (fd, own) = region::create(&mine, params.rank, max_medium)?;
        for e in 0..my_eps {
            // SAFETY: initialised by `create`, inside the mapping.
            let bell = unsafe { &*own.at(mine.bell(e)).cast::<Doorbell>() };
            bell.set_may_block(params.wait != WaitPolicy::Spin);
        }
        let mut blob = Vec::with_capacity(16);
        let my_pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        blob.extend_from_slice(&my_pid.to_le_bytes());
        blob.extend_from_slice(&(rustix::fd::AsRawFd::as_raw_fd(&fd)).to_le_bytes());
        blob.extend_from_slice(&(mine.len as u64).to_le_bytes());
        let all = boot.exchange(&blob)?;
        // Every rank's blob, indexed by rank: the bootstrap (a safe trait) is checked.
        if all.len() != n {
            return Err(InitError::Conduit {
                conduit: "smp",
                msg: format!(
                    "the bootstrap exchange returned {} region blobs for {n} ranks",
                    all.len()
                ),
            });
        }
        let mut peers = Peers::new(params.rank);
        let mut same_process = 0usize;
        let mut own = Some(own);
        let mut maps = Vec::with_capacity(ranks.len());
        let mut layouts = Vec::with_capacity(ranks.len());
        let mut max_med = Vec::with_capacity(ranks.len());
        for &r in &ranks {
            // What the job layout says rank r's region holds; its header must agree
            // before anything uses the region (`region::check_region`).
            let want = region::Expect {
                eps: jl.eps[r as usize] as usize,
                slots: slots_of(r as usize),
                total_eps: total,
                seg_len: jl.seg_len[r as usize],
                aux_len: params.aux_len,
            };
            let r = r as usize;
            if r == rank {
                let m = own.take().expect("own mapping");
                let (l, max) = region::check_region(&m, r as u32, want)?;
                maps.push(m);
                layouts.push(l);
                max_med.push(max);
                continue;
            }
            let b = &all[r];
            if b.len() != 16 {
                return Err(InitError::Conduit {
                    conduit: "smp",
                    msg: format!("rank {r} sent a {}-byte region blob, not 16", b.len()),
                });
            }
            let pid = u32::from_le_bytes(b[0..4].try_into().expect("4"));
            let pfd = u32::from_le_bytes(b[4..8].try_into().expect("4"));
            let len = u64::from_le_bytes(b[8..16].try_into().expect("8"));
            let len = usize::try_from(len).map_err(|_| InitError::Conduit {
                conduit: "smp",
                msg: format!(
                    "rank {r}'s region blob says {len} bytes, more than this machine maps"
                ),
            })?;
            // The pidfd first: mapping the region through /proc/<pid> then proves that
            // the pidfd names the process that owns it. A thread rank of this very
            // process is not watched: its process ends only with this one (a thread
            // rank that dies is reported by its thread launcher, `gex_boot::threads`).
            if pid != my_pid {
                peers.watch(r as u32, pid);
            } else {
                same_process += 1;
            }
            let (m, l, max) = region::map_peer(r as u32, pid, pfd, len, want)?;
            maps.push(m);
            layouts.push(l);
            max_med.push(max);
        }
        // Everyone has mapped everyone: the descriptor (the region's last name) can go.
        boot.barrier()?;
        drop(fd);
        let smp = Arc::new(Smp {
            maps,
            layouts,
            ranks,
            local_of,
            g_base,
            max_medium: max_med,
            peers,
            me,
            total,
            may_block: params.wait != WaitPolicy::Spin,
            overflow,
        });
        let eps = (0..my_eps).map(|e| smp.make_ep(me, e)).collect();
        tracing::debug!(
            rank,
            ranks = n,
            neighbours = smp.ranks.len(),
            watched = smp.peers.watched(),
            same_process,
            ring_cap,
            max_medium,
            "smp open"
        );
        Ok((smp, eps))
    }

    /// Whether `rank` is on this host (its memory is mapped here). False for ranks
    /// outside the job.
    #[inline(always)]
    pub fn is_neighbour(&self, rank: u32) -> bool {
        self.local_of
            .get(rank as usize)
            .is_some_and(|&l| l != NOT_LOCAL)
    }

    /// The ranks of this host (this rank included), in rank order.
    pub fn neighbours(&self) -> &[u32] {
        &self.ranks
    }

    /// Whether `dst` is an endpoint of a rank on this host.
    #[inline(always)]
    fn has(&self, dst: EpAddr) -> bool {
        let l = self
            .local_of
            .get(dst.rank as usize)
            .copied()
            .unwrap_or(NOT_LOCAL);
        l != NOT_LOCAL && (dst.ep as usize) < self.layouts[l as usize].slots
    }
}

impl Smp {
    /// The state of `dst`'s slot (local rank `li`) with one `Acquire` load: `Ok` if
    /// open, else [`ConduitError::NoEndpoint`] naming the state.
    fn slot_open(&self, li: usize, dst: EpAddr) -> Result<(), ConduitError> {
        match self.maps[li]
            .state(&self.layouts[li], dst.ep as usize)
            .load(gex_sync::atomic::Ordering::Acquire)
        {
            region::OPEN => Ok(()),
            region::CLOSED => Err(ConduitError::NoEndpoint {
                dst,
                state: "closed",
            }),
            _ => Err(ConduitError::NoEndpoint {
                dst,
                state: "not created yet",
            }),
        }
    }

    /// The ring from global EP `g` to EP `ep` of the rank with local index `r`.
    fn ring_ptrs(
        &self,
        r: usize,
        ep: usize,
        g: usize,
        reply: bool,
    ) -> (*const ring::RingCtl, *mut u8, usize) {
        let l = &self.layouts[r];
        let base = self.maps[r].at(l.ring(ep, g, reply));
        // SAFETY: base + DATA_OFFSET + cap is inside the ring's slot of the mapping.
        let data = unsafe { base.add(ring::DATA_OFFSET) };
        (base.cast_const().cast(), data, l.ring_cap)
    }

    /// Endpoint `e` of the rank with local index `me` (its slot is open).
    fn make_ep(self: &Arc<Self>, me: usize, e: usize) -> SmpEp {
        let total = self.total;
        let me_g = self.g_base[self.ranks[me] as usize] + e;
        let me_runtime = e >= self.layouts[me].eps;
        let mut tx = Tx {
            req: Vec::with_capacity(total),
            rep: Vec::with_capacity(total),
            dst: Vec::with_capacity(total),
            runtime: Vec::with_capacity(total),
            me_g,
            me_runtime,
            conduit: self.clone(),
            bells: Vec::with_capacity(total),
            segs: Vec::with_capacity(total),
            aux: Vec::with_capacity(total),
            g_base: self.g_base.clone(),
            pending: (0..total).map(|_| VecDeque::new()).collect(),
            npending: 0,
            ovf: (0..total).map(|_| VecDeque::new()).collect(),
            ovf_bytes: vec![0; total],
            novf: 0,
            ovf_cap: self.overflow,
        };
        let ml = &self.layouts[me];
        let mut rx = Rx {
            req: Vec::with_capacity(total),
            rep: Vec::with_capacity(total),
            src: Vec::with_capacity(total),
            active: Vec::new(),
            is_active: Vec::with_capacity(total),
            contacts: Raw::new(self.maps[me].at(ml.contacts(e))),
            seen_contacts: 0,
            seg: Seg {
                base: Raw::new(self.maps[me].at(ml.segment(e))),
                len: ml.seg_len,
            },
        };
        for (r, l) in self.layouts.iter().enumerate() {
            let global = self.ranks[r];
            for de in 0..l.slots {
                let g = self.g_base[global as usize] + de;
                debug_assert_eq!(g, tx.dst.len());
                // Rings to a slot made at run time exist once its owner opened it; an
                // endpoint made at run time announces its first contact: both connect
                // on first use.
                let eager = de < l.eps && !me_runtime;
                for reply in [false, true] {
                    let p = eager.then(|| {
                        let (ctl, data, cap) = self.ring_ptrs(r, de, me_g, reply);
                        // SAFETY: ctl/data/cap describe a ring of a live mapping,
                        // initialised at `region::create` (`de` was made at init); this
                        // endpoint is its only producer (me_g -> (r, de)).
                        unsafe { Producer::new(ctl, data, cap) }
                    });
                    if reply {
                        tx.rep.push(p)
                    } else {
                        tx.req.push(p)
                    }
                }
                tx.dst.push(EpAddr::new(global, de as u16));
                tx.runtime.push(de >= l.eps);
                tx.bells.push(Raw::new(self.maps[r].at(l.bell(de))));
                tx.aux.push(Raw::new(self.maps[r].at(l.aux(de))));
                tx.segs.push(Seg {
                    base: Raw::new(self.maps[r].at(l.segment(de))),
                    len: l.seg_len,
                });
                for reply in [false, true] {
                    let (ctl, data, cap) = self.ring_ptrs(me, e, g, reply);
                    // SAFETY: this endpoint's slot is open, so its incoming rings were
                    // initialised (`region::create` or `open_endpoint`); this endpoint
                    // is the only consumer of (g -> me).
                    let c = unsafe { Consumer::new(ctl, data, cap) };
                    if reply {
                        rx.rep.push(c)
                    } else {
                        rx.req.push(c)
                    }
                }
                rx.src.push(EpAddr::new(global, de as u16));
                let known = de < l.eps;
                rx.is_active.push(known);
                if known {
                    rx.active.push(g);
                }
            }
        }
        rx.rescan(self);
        let max_medium = self.max_medium[me];
        SmpEp {
            index: e as u16,
            tx,
            rx,
            bell: Raw::new(self.maps[me].at(ml.bell(e))),
            seen: 0,
            limits: Limits {
                max_args: 16,
                max_medium,
                max_long: usize::MAX,
            },
            np: None,
            watch: Watch::new(),
            conduit: self.clone(),
        }
    }
}

/// Writes one message (args, then Medium payload or Long descriptor) into `body`; for
/// Long, first copies the payload into the destination segment.
///
/// # Safety
/// `body` must be valid for `body_len(msg)` bytes and 8-byte aligned; for Long, `seg`
/// must be the destination's segment and `msg.offset + msg.payload.len() <= seg.len`.
#[inline(always)]
unsafe fn encode(body: *mut u8, msg: &OutMsg<'_>, seg: Seg) {
    let (args, payload) = (msg.args(), msg.payload());
    let area = args_area(args.len());
    // SAFETY: caller guarantees `body` has room for the args area and what follows.
    // Plain copies into `body`: a reserved record of the ring that the consumer reads
    // only after the commit's release (the Long payload below goes to a segment and is
    // atomic).
    unsafe {
        std::ptr::copy_nonoverlapping(args.as_ptr().cast::<u8>(), body, args.len() * 4);
        match msg.category() {
            Category::Short => {}
            Category::Medium => {
                std::ptr::copy_nonoverlapping(payload.as_ptr(), body.add(area), payload.len());
            }
            Category::Long => {
                // The core checked the range against the layout, and `open` checked
                // that the layout is what the destination's region maps.
                debug_assert!(
                    msg.offset()
                        .checked_add(payload.len())
                        .is_some_and(|e| e <= seg.len),
                    "gex smp: a Long past the destination's segment"
                );
                let dst = seg.base.0.as_ptr().add(msg.offset());
                if dst.cast_const() != payload.as_ptr() {
                    // Race-free: byte-wise atomic stores into the destination segment,
                    // which its owner and other ranks access at any time. The source is
                    // a shared borrow, so nothing writes it meanwhile (a source inside
                    // a segment came from `unsafe` `Segment::as_slice`, whose contract
                    // says so), and plain loads of it are right.
                    gex_sync::copy::atomic_write(dst, payload);
                }
                body.add(area).cast::<u64>().write(msg.offset() as u64);
                body.add(area + 8).cast::<u64>().write(payload.len() as u64);
            }
        }
    }
}

#[inline(always)]
fn body_len(msg: &OutMsg<'_>) -> usize {
    let area = args_area(msg.args().len());
    match msg.category() {
        Category::Short => area,
        Category::Medium => area + msg.payload().len(),
        Category::Long => area + 16,
    }
}

/// Publishes `msg` into `prod`; false if the ring is full.
#[inline(always)]
fn put(prod: &mut Producer, msg: &OutMsg<'_>, seg: Seg) -> bool {
    let len = body_len(msg);
    let Some(mut r) = prod.reserve(len) else {
        return false;
    };
    // SAFETY: the reservation is `len` bytes, 8-byte aligned; the core checked Long bounds.
    unsafe { encode(r.body_ptr(), msg, seg) };
    r.commit(user_word(msg), len);
    true
}

impl Tx {
    #[inline(always)]
    fn g(&self, dst: EpAddr) -> usize {
        let b = self.g_base[dst.rank as usize];
        debug_assert!(b != usize::MAX, "gex smp: {dst} is not on this host");
        b + dst.ep as usize
    }

    /// Makes the producers to slot `g` on first contact: a slot made at run time must
    /// be open (its state word, read with `Acquire`); an endpoint made at run time
    /// announces itself to the slot (its contacts word) so the slot's owner polls it.
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] if the slot is not open.
    #[cold]
    #[inline(never)]
    fn connect(&mut self, g: usize) -> Result<(), ConduitError> {
        use gex_sync::atomic::Ordering;
        let dst = self.dst[g];
        let c = self.conduit.clone();
        let li = c.local_of[dst.rank as usize] as usize;
        let (l, m) = (&c.layouts[li], &c.maps[li]);
        let de = dst.ep as usize;
        if de >= l.eps {
            self.check_open(g)?;
        }
        for reply in [false, true] {
            let (ctl, data, cap) = c.ring_ptrs(li, de, self.me_g, reply);
            // SAFETY: the ring was initialised by its owner before it published the
            // slot open (`region::create` for a slot made at init; `open_endpoint`,
            // whose `Release` store of `OPEN` the `Acquire` load above read); this
            // endpoint is its only producer.
            let p = Some(unsafe { Producer::new(ctl, data, cap) });
            if reply {
                self.rep[g] = p;
            } else {
                self.req[g] = p;
            }
        }
        if self.me_runtime {
            m.contacts(l, de).fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Checks that slot `g`, one made at run time, is open.
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] naming the state.
    #[cold]
    #[inline(never)]
    fn check_open(&self, g: usize) -> Result<(), ConduitError> {
        let dst = self.dst[g];
        let c = &self.conduit;
        let li = c.local_of[dst.rank as usize] as usize;
        c.slot_open(li, dst)
    }

    /// The request producer to slot `g`, connecting on first contact.
    #[inline(always)]
    fn req(&mut self, g: usize) -> Result<&mut Producer, ConduitError> {
        if self.req[g].is_none() {
            self.connect(g)?;
        }
        Ok(self.req[g].as_mut().expect("connected"))
    }

    /// `msg`'s ring record body, encoded into a buffer of its own (a Long's payload is
    /// written to the destination's segment now, as `put` would).
    #[cold]
    fn encoded(&self, g: usize, msg: &OutMsg<'_>) -> Vec<u8> {
        let len = body_len(msg);
        let mut buf = vec![0u64; len.div_ceil(8)];
        // SAFETY: `buf` has `len` bytes (rounded up), 8-byte aligned.
        unsafe { encode(buf.as_mut_ptr().cast(), msg, self.segs[g]) };
        // SAFETY: a u64 buffer viewed as its bytes.
        unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len) }.to_vec()
    }

    #[cold]
    fn defer(&mut self, g: usize, msg: &OutMsg<'_>) {
        let bytes = self.encoded(g, msg);
        self.pending[g].push_back((user_word(msg), bytes));
        self.npending += 1;
    }

    /// Whether the overflow to `g` can take `len` more bytes.
    #[inline]
    fn ovf_room(&self, g: usize, len: usize) -> bool {
        self.ovf_bytes[g].saturating_add(len) <= self.ovf_cap
    }

    /// A request whose ring is full, or which must wait behind earlier ones kept for
    /// the same destination: sends what the ring takes now, then the request if nothing
    /// is left before it, else keeps it if the overflow has room.
    #[cold]
    #[inline(never)]
    fn inject_slow(&mut self, g: usize, msg: &OutMsg<'_>) -> Result<Injected, ConduitError> {
        if !self.ovf[g].is_empty() {
            self.flush_ovf(g);
        }
        let seg = self.segs[g];
        if self.ovf[g].is_empty() && put(self.req(g)?, msg, seg) {
            self.bells[g].get().ring();
            return Ok(Injected::Sent);
        }
        let len = body_len(msg);
        if !self.ovf_room(g, len) {
            return Ok(Injected::WouldBlock);
        }
        let bytes = self.encoded(g, msg);
        self.ovf[g].push_back((user_word(msg), bytes));
        self.ovf_bytes[g] += len;
        self.novf += 1;
        Ok(Injected::Sent)
    }

    /// Moves the requests kept for `g` into its ring, in order, as far as it has room.
    #[cold]
    fn flush_ovf(&mut self, g: usize) {
        // Requests to an endpoint made at run time that has closed since: nobody will
        // take them.
        if self.runtime[g] && self.check_open(g).is_err() {
            self.novf -= self.ovf[g].len();
            self.ovf[g].clear();
            self.ovf_bytes[g] = 0;
            return;
        }
        let Some(req) = self.req[g].as_mut() else {
            return;
        };
        let mut sent = false;
        while let Some((user, body)) = self.ovf[g].front() {
            if !req.push(*user, &[body]) {
                break;
            }
            self.ovf_bytes[g] -= body.len();
            self.ovf[g].pop_front();
            self.novf -= 1;
            sent = true;
        }
        if sent {
            self.bells[g].get().ring();
        }
    }

    /// [`flush_ovf`](Self::flush_ovf) for every destination with requests kept.
    #[cold]
    fn flush_all_ovf(&mut self) {
        for g in 0..self.ovf.len() {
            if !self.ovf[g].is_empty() {
                self.flush_ovf(g);
            }
        }
    }

    #[cold]
    fn flush(&mut self) {
        for g in 0..self.pending.len() {
            // Replies deferred to an endpoint made at run time that has closed since:
            // nobody will take them.
            if !self.pending[g].is_empty() && self.runtime[g] && self.check_open(g).is_err() {
                self.npending -= self.pending[g].len();
                self.pending[g].clear();
                continue;
            }
            let mut sent = false;
            let Some(rep) = self.rep[g].as_mut() else {
                continue;
            };
            while let Some((user, body)) = self.pending[g].front() {
                if !rep.push(*user, &[body]) {
                    break;
                }
                self.pending[g].pop_front();
                self.npending -= 1;
                sent = true;
            }
            if sent {
                self.bells[g].get().ring();
            }
        }
    }
}

impl ReplyTx for Tx {
    #[inline]
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        let g = self.g(msg.dst());
        if self.rep[g].is_none() && self.connect(g).is_err() {
            // A requester made at run time that has closed since: nobody can take the
            // reply, which is dropped.
            return Ok(());
        }
        let seg = self.segs[g];
        if (self.npending == 0 || self.pending[g].is_empty())
            && put(self.rep[g].as_mut().expect("connected"), msg, seg)
        {
            self.bells[g].get().ring();
        } else if !(self.runtime[g] && self.check_open(g).is_err()) {
            self.defer(g, msg);
        }
        Ok(())
    }
}

/// Delivers up to `budget` records of one ring.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn drain<D: Deliver>(
    c: &mut Consumer,
    src: EpAddr,
    g: usize,
    seg: Seg,
    kind: Kind,
    d: &mut D,
    tx: &mut Tx,
    budget: usize,
) -> usize {
    let mut n = 0;
    while n < budget {
        let (user, body) = match c.try_peek() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            // poll cannot return an error: end this rank naming the sender; the
            // launcher ends the job.
            Err(e) => panic!("gex smp: {src} corrupted the {kind:?} ring to this rank: {e}"),
        };
        let rec = match record::decode(user, body, kind, seg.len) {
            Ok(r) => r,
            Err(e) => panic!(
                "gex smp: corrupt {kind:?} record from {src} (user word {user:#010x}, {} bytes): {e}",
                body.len()
            ),
        };
        // Long payloads are described, not lent: the core reads them from the segment.
        let (category, payload, offset, len): (Category, &[u8], usize, usize) = match rec.body {
            Body::Short => (Category::Short, &[], 0, 0),
            Body::Medium(p) => (Category::Medium, p, 0, 0),
            Body::Long { offset, len } => (Category::Long, &[], offset, len),
        };
        let args = rec.args;
        debug_assert_eq!(category, rec.category());
        let inc = Incoming {
            src,
            handler: rec.handler,
            kind,
            category,
            args,
            payload,
            offset,
            len,
        };
        d.deliver(&inc, tx);
        c.pop();
        n += 1;
        if kind == Kind::Request && tx.npending != 0 && !tx.pending[g].is_empty() {
            break;
        }
    }
    n
}

impl SmpEp {
    fn dst_g(&self, dst: EpAddr) -> usize {
        self.tx.g(dst)
    }

    /// Ends this rank if a neighbour has ended; at most one `poll(2)` per
    /// `live::CHECK_INTERVAL` (see the `live` module).
    #[cold]
    #[inline(never)]
    fn check_peers(&mut self) {
        if self.watch.due() {
            let ended = self.conduit.peers.ended();
            if !ended.is_empty() {
                self.conduit.peers.fail(&ended);
            }
        }
    }

    /// The body of `poll`: flushes deferred replies, drains the reply rings, then the
    /// request rings, up to about `budget` messages.
    #[inline(always)]
    fn drain_rings<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        if self.tx.npending > 0 {
            self.tx.flush();
        }
        if self.tx.novf > 0 {
            self.tx.flush_all_ovf();
        }
        if self.rx.contacted() {
            self.rx.rescan(&self.conduit);
        }
        let mut n = 0;
        let rx = &mut self.rx;
        for i in 0..rx.active.len() {
            let g = rx.active[i];
            if n >= budget {
                return n;
            }
            n += drain(
                &mut rx.rep[g],
                rx.src[g],
                g,
                rx.seg,
                Kind::Reply,
                d,
                &mut self.tx,
                budget - n,
            );
        }
        for i in 0..rx.active.len() {
            let g = rx.active[i];
            if n >= budget {
                return n;
            }
            if self.tx.npending != 0 && !self.tx.pending[g].is_empty() {
                continue;
            }
            n += drain(
                &mut rx.req[g],
                rx.src[g],
                g,
                rx.seg,
                Kind::Request,
                d,
                &mut self.tx,
                budget - n,
            );
        }
        n
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
            self.tx.inject_slow(g, msg)
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
