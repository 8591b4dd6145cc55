//! One endpoint over a verbs provider `V` ([`Ep`]): its device context, completion
//! queue, shared receive queue, a queue pair per peer endpoint (made at open, or on
//! first contact through the UD connection channel), registered buffers, the credit
//! windows, AM injection and delivery, native RMA and atomics.
//!
//! # Lazy wire-up (`GEX_IBV_CONNECT=lazy`)
//! The queue pair to a peer endpoint is made on first contact by the endpoint's
//! connection channel (`crate::connect`, which has the protocol and its thread); until
//! it is ready, operations to that peer answer back-pressure. The endpoint keeps, per
//! peer, whether it is ready and its queue pair, so the connected fast path costs one
//! more test.
//!
//! # Safety
//! - The segment (owned by the conduit, which outlives the endpoint and its grave) and
//!   the endpoint's buffers ([`Mem`]) are registered for as long as the endpoint's
//!   resources live: the regions are dropped before the buffers (field order of
//!   [`Res`]), and the conduit's segments after every endpoint's resources.
//! - A receive buffer is read only after its completion was polled and before it is
//!   posted again (the NIC does not write it in between); a send slot is written only
//!   while no work request uses it (it is free between its SEND's completion and its
//!   next use).
//! - Native operations: the caller keeps its buffer valid until completion
//!   (`native_*`'s `# Safety`); the operation goes through a registered bounce slot that
//!   is copied to or from the caller's buffer at completion, so the NIC never touches
//!   the caller's memory.
#![allow(unsafe_code)]

use crate::connect::{Channel, Params, Progress, UdParts};
use crate::mem::Mem;
use crate::verbs::QpAddr;
use crate::verbs::{
    Access, QpCaps, SendOp, SendWr, Sge, Verbs, VerbsError, Wc, WcOpcode, WcStatus,
};
use crate::wire::{self, HDR_MAX, Header, MAX_ARGS, wrid};
use gex_core::spi::{
    AtomicBase, AtomicKind, Capabilities, ConduitError, Deliver, Incoming, Limits, Native,
    NativeAtomic, NativeResult, OutMsg, ReplyTx, SegRange,
};
use gex_core::{Category, EpAddr, EpIndex, Injected, Kind};
use gex_sync::atomic::Ordering;
use std::collections::{HashMap, VecDeque};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// Largest inline SEND (header, arguments and payload).
pub(crate) const MAX_INLINE: u32 = 128;
/// Native operations in flight per endpoint.
pub(crate) const RMA_SLOTS: usize = 64;
/// Bytes of one native operation's bounce buffer (larger transfers are split).
pub(crate) const RMA_CHUNK: usize = 64 << 10;
/// Largest native transfer (larger ones take gex-rma's AM path).
pub(crate) const MAX_TRANSFER: usize = 1 << 30;

/// Native operations started, per conduit ([`crate::Ibv::stats`]).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) puts: gex_sync::atomic::AtomicU64,
    pub(crate) gets: gex_sync::atomic::AtomicU64,
    pub(crate) atomics: gex_sync::atomic::AtomicU64,
    /// Large transfers served by a cached registration.
    pub(crate) reg_hits: gex_sync::atomic::AtomicU64,
    /// Registrations made for the cache (first use of a registered buffer).
    pub(crate) reg_misses: gex_sync::atomic::AtomicU64,
    /// Cached registrations dropped to make room.
    pub(crate) reg_evictions: gex_sync::atomic::AtomicU64,
    /// The buffers the application registered (`crate::Ibv::register`).
    pub(crate) registry: Registry,
}

/// The buffers the application registered for large native transfers
/// ([`crate::Ibv::register`]): while an entry is here, its memory is borrowed by the
/// application's [`crate::Registered`] guard, so it is allocated and mapped. Endpoints
/// keep their own registrations of them ([`Ep`]'s cache) and drop those once the entry
/// is gone (`generation` changed) and no operation uses them.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) entries: std::sync::Mutex<Vec<RegEntry>>,
    /// Bumped (Release) after every removal, under the lock.
    pub(crate) generation: gex_sync::atomic::AtomicU64,
    /// Entries now (read without the lock: none means no lookup).
    pub(crate) count: gex_sync::atomic::AtomicU64,
    pub(crate) next_id: gex_sync::atomic::AtomicU64,
}

/// One registered buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegEntry {
    pub(crate) id: u64,
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

/// An endpoint's registration of a registered buffer.
struct Cached<V: Verbs> {
    id: u64,
    addr: usize,
    len: usize,
    mr: V::Mr,
    /// Operations in flight using it.
    users: u32,
    /// Its buffer was unregistered: never used again, dropped once `users` is 0.
    dead: bool,
    last_use: u64,
}

/// What one endpoint knows of a peer endpoint at open.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerInfo {
    pub(crate) addr: EpAddr,
    pub(crate) seg_addr: u64,
    pub(crate) seg_len: usize,
    pub(crate) seg_rkey: u32,
    pub(crate) credit_addr: u64,
    pub(crate) credit_rkey: u32,
}

/// Settings every endpoint of the job shares.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// Queue pairs made on first contact (`GEX_IBV_CONNECT=lazy`), not all at open.
    pub(crate) lazy: bool,
    /// How long a connection may take before the peer is failed.
    pub(crate) connect_timeout: Duration,
    /// GID index for address handles and connections.
    pub(crate) gid_index: u8,
    pub(crate) max_medium: usize,
    pub(crate) credits: u32,
    pub(crate) send_slots: usize,
    pub(crate) native_rma: bool,
    pub(crate) native_atomics: bool,
    /// Registrations of registered buffers each endpoint keeps (`GEX_IBV_REG_CACHE`).
    pub(crate) reg_cache: usize,
}

impl Shape {
    pub(crate) fn buf_len(&self) -> usize {
        (HDR_MAX + self.max_medium).next_multiple_of(64)
    }
    /// Send queue depth of each queue pair: requests and replies (two work requests each
    /// for a Long), credit words, native operations.
    pub(crate) fn sq_depth(&self) -> u32 {
        4 * self.credits + 8 + RMA_SLOTS as u32
    }
    /// Send queue entries kept for replies and credit words.
    fn sq_reserve(&self) -> u32 {
        2 * self.credits + 8
    }
}

/// A peer endpoint's state at this endpoint.
struct Peer<V: Verbs> {
    info: PeerInfo,
    /// Our queue pair for the pair (made at open, or on first contact); sends go on it
    /// only when `ready`.
    qp: Option<Arc<V::Qp>>,
    ready: bool,
    sq_used: u32,
    sent_req: u64,
    sent_rep: u64,
    /// Messages of each kind from this peer delivered (and their buffers reposted).
    consumed_req: u64,
    consumed_rep: u64,
    /// The values last written to the peer's credit words.
    credited_req: u64,
    credited_rep: u64,
    /// Replies that could not leave at once, in order.
    deferred: VecDeque<Deferred>,
    /// Why its queue pair failed.
    failed: Option<String>,
}

/// A reply waiting for resources; `release` returns its request's credit when it leaves.
struct Deferred {
    h: Header,
    args: [u32; MAX_ARGS],
    payload: Vec<u8>,
    release: bool,
}

/// The endpoint's verbs resources: dropped in field order, regions before the buffers
/// they cover, the device context last.
pub(crate) struct Res<V: Verbs> {
    srq: Arc<V::Srq>,
    cq: Arc<V::Cq>,
    seg_mr: V::Mr,
    recv_mr: V::Mr,
    send_mr: V::Mr,
    credit_in_mr: V::Mr,
    credit_out_mr: V::Mr,
    rma_mr: V::Mr,
    recv: Mem,
    send: Mem,
    credit_in: Mem,
    credit_out: Mem,
    rma: Mem,
    pub(crate) v: Arc<V>,
}

/// An operation slot of a native operation: where its result goes at completion.
#[derive(Clone, Copy, Debug, Default)]
struct RmaOp {
    busy: bool,
    ticket: u64,
    /// Chunks still outstanding.
    left: u32,
    /// Get: copy `len` bytes of the slot's bounce buffer to `out` at completion.
    out: usize,
    len: usize,
    /// Atomic: where the fetched value goes, and how to convert it.
    result: usize,
    atomic: Option<NativeAtomic>,
    error: Option<WcStatus>,
}

/// The connection channel of an endpoint and the thread serving it (joined when the
/// endpoint is dropped).
type ChannelThread<V> = (Arc<Channel<V>>, Option<std::thread::JoinHandle<()>>);

/// One endpoint over the verbs provider `V`.
pub(crate) struct Ep<V: Verbs> {
    index: EpIndex,
    rank: u32,
    me: u32,
    shape: Shape,
    peers: Vec<Peer<V>>,
    /// Global peer index of each (rank, endpoint): `base[rank] + ep`.
    base: Vec<u32>,
    by_qpn: HashMap<u32, u32>,
    free_slots: Vec<u32>,
    recv_count: u32,
    seg: (NonNull<u8>, usize),
    rma_ops: Vec<RmaOp>,
    free_rma: Vec<u32>,
    next_ticket: u64,
    /// Completed tickets not yet tested.
    done_tickets: Vec<u64>,
    deferred_total: usize,
    owed_credits: bool,
    /// Receive completions taken from the completion queue by `block`, delivered by the
    /// next `poll` (first).
    stash: VecDeque<Wc>,
    stats: std::sync::Arc<Counters>,
    /// Per operation slot: the registration of a caller's buffer (large transfers),
    /// dropped at completion. Before `res`: dropped before the device.
    op_mrs: Vec<Option<V::Mr>>,
    /// Per operation slot: the id of the cached registration it uses (0: none).
    op_cached: Vec<u64>,
    /// Registrations of the application's registered buffers, at most `rcache_cap`
    /// (`GEX_IBV_REG_CACHE`), least recently used evicted first.
    rcache: Vec<Cached<V>>,
    rcache_gen: u64,
    rcache_clock: u64,
    /// The connection channel (lazy wire-up) and its thread, stopped and joined when
    /// the endpoint is dropped; before `res`: the queue pairs it holds go before the
    /// completion queue.
    chan: Option<ChannelThread<V>>,
    /// Peers an operation found not ready (connections the owner waits for); `block`
    /// looks at them before sleeping, since the channel's thread completes connections
    /// without signalling this endpoint's completion queue.
    awaiting: Vec<u32>,
    pub(crate) res: Res<V>,
}

impl<V: Verbs> Drop for Ep<V> {
    fn drop(&mut self) {
        if let Some((ch, thread)) = &mut self.chan {
            ch.stop();
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

// SAFETY: `seg` points into the conduit's segment, valid while the conduit lives (the
// endpoint holds no reference to it: the conduit keeps it alive, see `crate::Ibv`); the
// rest is owned data and provider handles, which are `Send`.
unsafe impl<V: Verbs> Send for Ep<V> {}

fn verr(peer: EpAddr, what: &str, e: VerbsError) -> ConduitError {
    ConduitError::Network(format!(
        "ibv: {what} to rank {} endpoint {}: {e}",
        peer.rank, peer.ep
    ))
}

/// Everything `open` made for one endpoint before the peers' addresses are known.
pub(crate) struct Unconnected<V: Verbs> {
    /// Eager wire-up: one queue pair per peer endpoint; lazy: none.
    pub(crate) qps: Vec<V::Qp>,
    /// Lazy wire-up: the UD queue pair and its buffers.
    ud: Option<UdParts<V>>,
    pub(crate) res: Res<V>,
    pub(crate) seg: (NonNull<u8>, usize),
}

mod am;
mod open;
mod rma;
