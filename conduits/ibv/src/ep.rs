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
    NativeAtomic, OutMsg, ReplyTx,
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

impl<V: Verbs> Unconnected<V> {
    /// Opens the device, registers `seg` and the buffers, posts the receives and
    /// creates one queue pair per peer endpoint (`npeers`).
    pub(crate) fn new(
        v: V,
        seg: (NonNull<u8>, usize),
        shape: &Shape,
        npeers: usize,
    ) -> Result<Self, String> {
        let e = |what: &str, e: VerbsError| format!("{what}: {e}");
        let buf = shape.buf_len();
        let nrecv = npeers * 2 * shape.credits as usize;
        let alloc = |len: usize, what: &str| {
            Mem::new(len).ok_or_else(|| format!("cannot allocate {len} bytes of {what}"))
        };
        let recv = alloc(nrecv * buf, "receive buffers")?;
        let send = alloc(shape.send_slots * buf, "send buffers")?;
        let credit_in = alloc(npeers * 16, "credit words")?;
        let credit_out = alloc(npeers * 16, "credit words")?;
        let rma = alloc(RMA_SLOTS * RMA_CHUNK, "RMA bounce buffers")?;
        let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        // SAFETY: each block lives in `Res` next to its region, dropped after it (field
        // order); the segment lives in the conduit, which outlives every endpoint's
        // resources.
        let reg = |m: *mut u8, len: usize, a: Access| unsafe { v.reg_mr(m, len, a) };
        let seg_mr = reg(seg.0.as_ptr(), seg.1, remote | Access::REMOTE_ATOMIC)
            .map_err(|x| e("registering the segment", x))?;
        let recv_mr = reg(recv.at(0), recv.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering receive buffers", x))?;
        let send_mr = reg(send.at(0), send.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering send buffers", x))?;
        let credit_in_mr = reg(credit_in.at(0), credit_in.len(), remote)
            .map_err(|x| e("registering credit words", x))?;
        let credit_out_mr = reg(credit_out.at(0), credit_out.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering credit words", x))?;
        let rma_mr = reg(rma.at(0), rma.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering RMA buffers", x))?;
        let cq_depth = nrecv as u32 + npeers as u32 * shape.sq_depth() + 64;
        let cq = v.create_cq(cq_depth).map_err(|x| e("ibv_create_cq", x))?;
        let srq = v
            .create_srq(nrecv as u32)
            .map_err(|x| e("ibv_create_srq", x))?;
        for i in 0..nrecv {
            let sge = Sge {
                addr: recv.at(i * buf) as u64,
                len: buf as u32,
                lkey: V::lkey(&recv_mr),
            };
            // SAFETY: a buffer of the registered receive block, not accessed until its
            // completion is polled.
            unsafe { v.post_srq_recv(&srq, wrid::make(wrid::RECV, 0, i as u32), sge) }
                .map_err(|x| e("ibv_post_srq_recv", x))?;
        }
        let caps = QpCaps {
            max_send_wr: shape.sq_depth(),
            max_inline: MAX_INLINE,
        };
        let qps = if shape.lazy {
            Vec::new()
        } else {
            (0..npeers)
                .map(|_| {
                    v.create_qp(&cq, &srq, caps)
                        .map_err(|x| e("ibv_create_qp", x))
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        let ud = if shape.lazy {
            Some(UdParts::new(&v)?)
        } else {
            None
        };
        Ok(Unconnected {
            ud,
            res: Res {
                srq: Arc::new(srq),
                cq: Arc::new(cq),
                seg_mr,
                recv_mr,
                send_mr,
                credit_in_mr,
                credit_out_mr,
                rma_mr,
                recv,
                send,
                credit_in,
                credit_out,
                rma,
                v: Arc::new(v),
            },
            qps,
            seg,
        })
    }

    /// The UD queue pair's address (lazy wire-up).
    pub(crate) fn ud_addr(&self) -> Option<QpAddr> {
        self.ud.as_ref().map(|u| u.addr(&self.res.v))
    }

    /// What this endpoint publishes of itself: segment address, length and key, credit
    /// words' address and key.
    pub(crate) fn published(&self) -> (u64, u64, u32, u64, u32) {
        (
            self.seg.0.as_ptr() as u64,
            self.seg.1 as u64,
            V::rkey(&self.res.seg_mr),
            self.res.credit_in.at(0) as u64,
            V::rkey(&self.res.credit_in_mr),
        )
    }

    /// Finishes the endpoint once its queue pairs are connected (eager), or with the
    /// peers' UD addresses `ud_peers` (lazy).
    #[expect(clippy::too_many_arguments, reason = "one call site, in open")]
    pub(crate) fn into_ep(
        self,
        index: EpIndex,
        rank: u32,
        base: Vec<u32>,
        infos: Vec<PeerInfo>,
        ud_peers: Vec<QpAddr>,
        shape: Shape,
        stats: std::sync::Arc<Counters>,
    ) -> Result<Ep<V>, String> {
        let me = base[rank as usize] + index as u32;
        let mut by_qpn = HashMap::new();
        let mut qps = self.qps.into_iter();
        let peers: Vec<Peer<V>> = infos
            .into_iter()
            .enumerate()
            .map(|(g, info)| {
                let qp = qps.next();
                if let Some(qp) = &qp {
                    by_qpn.insert(self.res.v.qp_addr(qp).qpn, g as u32);
                }
                Peer {
                    info,
                    ready: qp.is_some(),
                    qp: qp.map(Arc::new),
                    sq_used: 0,
                    sent_req: 0,
                    sent_rep: 0,
                    consumed_req: 0,
                    consumed_rep: 0,
                    credited_req: 0,
                    credited_rep: 0,
                    deferred: VecDeque::new(),
                    failed: None,
                }
            })
            .collect();
        let recv_count = (peers.len() * 2 * shape.credits as usize) as u32;
        let addrs: Vec<EpAddr> = peers.iter().map(|p| p.info.addr).collect();
        let ud = self.ud;
        let mut ep = Ep {
            index,
            rank,
            me,
            shape,
            peers,
            base,
            by_qpn,
            free_slots: (0..shape.send_slots as u32).rev().collect(),
            recv_count,
            seg: self.seg,
            rma_ops: vec![RmaOp::default(); RMA_SLOTS],
            free_rma: (0..RMA_SLOTS as u32).rev().collect(),
            next_ticket: 1,
            done_tickets: Vec::with_capacity(RMA_SLOTS),
            deferred_total: 0,
            owed_credits: false,
            stash: VecDeque::with_capacity(recv_count as usize),
            stats,
            op_mrs: (0..RMA_SLOTS).map(|_| None).collect(),
            op_cached: vec![0; RMA_SLOTS],
            rcache: Vec::new(),
            rcache_gen: 0,
            rcache_clock: 0,
            chan: None,
            awaiting: Vec::new(),
            res: self.res,
        };
        if let Some(parts) = ud {
            let p = Params {
                me,
                rank,
                index,
                addrs,
                ud_peers,
                caps: QpCaps {
                    max_send_wr: shape.sq_depth(),
                    max_inline: MAX_INLINE,
                },
                gid_index: shape.gid_index,
                timeout: shape.connect_timeout,
            };
            let ch = Arc::new(Channel::new(
                parts,
                p,
                ep.res.v.clone(),
                ep.res.cq.clone(),
                ep.res.srq.clone(),
            ));
            let thread = ch.spawn()?;
            ep.chan = Some((ch, Some(thread)));
        }
        Ok(ep)
    }
}

/// A message to send: header, arguments, payload, Long offset.
#[derive(Clone, Copy)]
struct Out<'a> {
    h: Header,
    args: &'a [u32],
    payload: &'a [u8],
}

impl<'a> Out<'a> {
    fn of(msg: &OutMsg<'a>) -> Self {
        Out {
            h: Header {
                handler: msg.handler(),
                kind: msg.kind(),
                category: msg.category(),
                nargs: msg.args().len(),
                len: msg.payload().len(),
                offset: msg.offset(),
            },
            args: msg.args(),
            payload: msg.payload(),
        }
    }
}

impl<V: Verbs> Ep<V> {
    fn g(&self, dst: EpAddr) -> Option<u32> {
        let b = *self.base.get(dst.rank as usize)?;
        let next = self
            .base
            .get(dst.rank as usize + 1)
            .copied()
            .unwrap_or(self.peers.len() as u32);
        let g = b + dst.ep as u32;
        (g < next).then_some(g)
    }

    fn credits_back(&self, g: u32, kind: Kind) -> u64 {
        let w = 2 * g as usize + usize::from(kind == Kind::Reply);
        self.res.credit_in.load_word(w)
    }

    fn has_credit(&self, g: u32, kind: Kind) -> bool {
        let p = &self.peers[g as usize];
        let sent = if kind == Kind::Request {
            p.sent_req
        } else {
            p.sent_rep
        };
        sent - self.credits_back(g, kind) < self.shape.credits as u64
    }

    /// Posts `wr` on peer `gi`'s queue pair.
    ///
    /// # Safety
    /// As [`Verbs::post_send`].
    unsafe fn post(&self, gi: usize, wr: &SendWr) -> Result<(), VerbsError> {
        match &self.peers[gi].qp {
            // SAFETY: the caller's promise.
            Some(qp) => unsafe { self.res.v.post_send(qp, wr) },
            None => Err(VerbsError::Invalid("queue pair not made".into())),
        }
    }

    /// Tries to send `m` to peer `g` now: `Ok(false)` when resources lack.
    fn try_send(&mut self, g: u32, m: &Out<'_>) -> Result<bool, ConduitError> {
        let gi = g as usize;
        if let Some(why) = &self.peers[gi].failed {
            return Err(ConduitError::PeerGone {
                rank: self.peers[gi].info.addr.rank,
                detail: why.clone(),
            });
        }
        if !self.peers[gi].ready && !self.connect(g)? {
            return Ok(false);
        }
        let long = m.h.category == Category::Long && !m.payload.is_empty();
        let wrs = 1 + u32::from(long);
        let limit = if m.h.kind == Kind::Request {
            self.shape.sq_depth() - self.shape.sq_reserve()
        } else {
            self.shape.sq_depth() - 4
        };
        if self.peers[gi].sq_used + wrs > limit || !self.has_credit(g, m.h.kind) {
            return Ok(false);
        }
        let head = HDR_MAX.min(wire::HDR + 4 * m.args.len());
        let body = if m.h.category == Category::Medium {
            m.payload.len()
        } else {
            0
        };
        let total = head + body;
        let dst = self.peers[gi].info.addr;
        if !long && total <= MAX_INLINE as usize {
            let mut buf = [0u8; MAX_INLINE as usize];
            let n = wire::encode(&mut buf, &m.h, m.args);
            buf[n..n + body].copy_from_slice(&m.payload[..body]);
            let wr = SendWr {
                wr_id: wrid::make(wrid::SEND, g, wrid::NO_SLOT),
                op: SendOp::Send,
                sge: Sge {
                    addr: buf.as_ptr() as u64,
                    len: total as u32,
                    lkey: 0,
                },
                signaled: true,
                inline: true,
            };
            // SAFETY: inline: the bytes are copied during the call.
            unsafe { self.post(gi, &wr) }.map_err(|e| verr(dst, "SEND", e))?;
        } else {
            let Some(slot) = self.free_slots.pop() else {
                return Ok(false);
            };
            let buf_len = self.shape.buf_len();
            let at = slot as usize * buf_len;
            // SAFETY: the slot is free (no work request uses it) and inside the send block.
            let sbuf = unsafe { std::slice::from_raw_parts_mut(self.res.send.at(at), buf_len) };
            let n = wire::encode(sbuf, &m.h, m.args);
            let lkey = V::lkey(&self.res.send_mr);
            if long {
                sbuf[HDR_MAX..HDR_MAX + m.payload.len()].copy_from_slice(m.payload);
                let p = &self.peers[gi].info;
                let wr = SendWr {
                    wr_id: wrid::make(wrid::LONG, g, slot),
                    op: SendOp::Write {
                        remote_addr: p.seg_addr + m.h.offset as u64,
                        rkey: p.seg_rkey,
                    },
                    sge: Sge {
                        addr: sbuf[HDR_MAX..].as_ptr() as u64,
                        len: m.payload.len() as u32,
                        lkey,
                    },
                    signaled: true,
                    inline: false,
                };
                // SAFETY: the slot stays untouched until its SEND completes (after this).
                if let Err(e) = unsafe { self.post(gi, &wr) } {
                    self.free_slots.push(slot);
                    return match e {
                        VerbsError::QueueFull => Ok(false),
                        e => Err(verr(dst, "RDMA WRITE", e)),
                    };
                }
                self.peers[gi].sq_used += 1;
            } else {
                sbuf[n..n + body].copy_from_slice(&m.payload[..body]);
            }
            let wr = SendWr {
                wr_id: wrid::make(wrid::SEND, g, slot),
                op: SendOp::Send,
                sge: Sge {
                    addr: sbuf.as_ptr() as u64,
                    len: total as u32,
                    lkey,
                },
                signaled: true,
                inline: false,
            };
            // SAFETY: the slot stays untouched until this SEND completes.
            unsafe { self.post(gi, &wr) }.map_err(|e| verr(dst, "SEND", e))?;
        }
        let p = &mut self.peers[gi];
        p.sq_used += 1;
        match m.h.kind {
            Kind::Request => p.sent_req += 1,
            Kind::Reply => p.sent_rep += 1,
        }
        Ok(true)
    }

    /// Counts a message of `kind` from peer `g` as consumed and returns credits when a
    /// half window is owed.
    fn consumed(&mut self, g: u32, kind: Kind) {
        let p = &mut self.peers[g as usize];
        match kind {
            Kind::Request => p.consumed_req += 1,
            Kind::Reply => p.consumed_rep += 1,
        }
        let owed = (p.consumed_req - p.credited_req).max(p.consumed_rep - p.credited_rep);
        if owed * 2 >= self.shape.credits as u64 {
            self.send_credits(g);
        }
    }

    /// Writes peer `g`'s credit words (at the peer: the words of this endpoint).
    fn send_credits(&mut self, g: u32) {
        let gi = g as usize;
        let depth = self.shape.sq_depth();
        for kind in [Kind::Request, Kind::Reply] {
            let p = &self.peers[gi];
            let (consumed, credited) = match kind {
                Kind::Request => (p.consumed_req, p.credited_req),
                Kind::Reply => (p.consumed_rep, p.credited_rep),
            };
            if consumed == credited || p.failed.is_some() || !p.ready {
                continue;
            }
            if p.sq_used + 1 > depth {
                self.owed_credits = true;
                continue;
            }
            let w = 2 * gi + usize::from(kind == Kind::Reply);
            self.res.credit_out.store_word(w, consumed);
            // At the peer, this endpoint's words are at its global index.
            let remote =
                p.info.credit_addr + 16 * self.me as u64 + 8 * u64::from(kind == Kind::Reply);
            let wr = SendWr {
                wr_id: wrid::make(wrid::CREDIT, g, 0),
                op: SendOp::Write {
                    remote_addr: remote,
                    rkey: p.info.credit_rkey,
                },
                sge: Sge {
                    addr: self.res.credit_out.at(w * 8) as u64,
                    len: 8,
                    lkey: V::lkey(&self.res.credit_out_mr),
                },
                signaled: true,
                inline: false,
            };
            // SAFETY: a registered credit word; it only ever grows, so whenever the NIC
            // reads it, it reads a valid count.
            match unsafe { self.post(gi, &wr) } {
                Ok(()) => {
                    let p = &mut self.peers[gi];
                    p.sq_used += 1;
                    match kind {
                        Kind::Request => p.credited_req = consumed,
                        Kind::Reply => p.credited_rep = consumed,
                    }
                }
                Err(_) => self.owed_credits = true,
            }
        }
    }

    /// Sends what waits: deferred replies and owed credits; retransmits connection
    /// datagrams that are due.
    fn flush(&mut self) {
        if self.owed_credits {
            self.owed_credits = false;
            for g in 0..self.peers.len() as u32 {
                self.send_credits(g);
            }
        }
        if self.deferred_total == 0 {
            return;
        }
        for g in 0..self.peers.len() as u32 {
            while let Some(d) = self.peers[g as usize].deferred.pop_front() {
                let out = Out {
                    h: d.h,
                    args: &d.args[..d.h.nargs],
                    payload: &d.payload,
                };
                match self.try_send(g, &out) {
                    Ok(true) => {
                        self.deferred_total -= 1;
                        if d.release {
                            self.consumed(g, Kind::Request);
                        }
                    }
                    Ok(false) => {
                        self.peers[g as usize].deferred.push_front(d);
                        break;
                    }
                    Err(e) => panic!(
                        "ibv conduit: rank {} endpoint {}: a queued reply failed: {e}",
                        self.rank, self.index
                    ),
                }
            }
        }
    }

    fn defer_reply(&mut self, g: u32, m: &Out<'_>) {
        let mut args = [0u32; MAX_ARGS];
        args[..m.args.len()].copy_from_slice(m.args);
        let d = Deferred {
            h: m.h,
            args,
            payload: m.payload.to_vec(),
            release: false,
        };
        self.peers[g as usize].deferred.push_back(d);
        self.deferred_total += 1;
    }

    fn fail_peer(&mut self, wc: &Wc) -> ! {
        let g = if wc.opcode == WcOpcode::Recv || wrid::kind(wc.wr_id) == wrid::RECV {
            self.by_qpn
                .get(&wc.qp_num)
                .map_or(usize::MAX, |&g| g as usize)
        } else {
            // Release what the request held first: the endpoint stays usable, and an
            // operation's ticket completes (in error), so nothing waits for it forever.
            self.send_done(wc);
            wrid::peer(wc.wr_id) as usize
        };
        let who = self.peers.get(g).map(|p| p.info.addr);
        let op = match wrid::kind(wc.wr_id) {
            wrid::SEND => "an AM (SEND)",
            wrid::LONG => "a Long payload (RDMA WRITE)",
            wrid::CREDIT => "a credit update (RDMA WRITE)",
            wrid::RMA => "a native RMA or atomic operation",
            _ => "a receive",
        };
        let why = wc.status.describe();
        if let Some(p) = self.peers.get_mut(g) {
            p.failed = Some(why.clone());
        }
        match who {
            Some(a) => panic!(
                "ibv conduit: rank {} endpoint {}: {op} to rank {} endpoint {} failed: {why}",
                self.rank, self.index, a.rank, a.ep
            ),
            None => panic!(
                "ibv conduit: rank {} endpoint {}: {op} failed: {why}",
                self.rank, self.index
            ),
        }
    }

    fn send_done(&mut self, wc: &Wc) {
        let g = wrid::peer(wc.wr_id) as usize;
        if let Some(p) = self.peers.get_mut(g) {
            p.sq_used = p.sq_used.saturating_sub(1);
        }
        match wrid::kind(wc.wr_id) {
            wrid::SEND => {
                let slot = wrid::index(wc.wr_id);
                if slot != wrid::NO_SLOT {
                    self.free_slots.push(slot);
                }
            }
            wrid::RMA => self.rma_done(wrid::index(wc.wr_id) as usize, wc.status),
            _ => {}
        }
    }

    /// Handles a receive: decodes, delivers, reposts, counts the credit.
    fn recv_done<D: Deliver>(&mut self, wc: &Wc, d: &mut D) {
        let i = wrid::index(wc.wr_id) as usize;
        let g = match self.by_qpn.get(&wc.qp_num) {
            Some(&g) => g,
            // The first message of a peer that connected to us.
            None => self.adopt_qpn(wc.qp_num).unwrap_or_else(|| {
                panic!(
                    "ibv conduit: rank {} endpoint {}: a message on unknown queue pair {}",
                    self.rank, self.index, wc.qp_num
                )
            }),
        };
        let buf_len = self.shape.buf_len();
        let src = self.peers[g as usize].info.addr;
        let n = (wc.byte_len as usize).min(buf_len);
        // SAFETY: the receive completed (the NIC wrote it and will not until reposted);
        // inside the receive block.
        let bytes = unsafe { std::slice::from_raw_parts(self.res.recv.at(i * buf_len), n) };
        let mut args = [0u32; MAX_ARGS];
        let h = match wire::decode(bytes, &mut args) {
            Ok(h) => h,
            Err(e) => panic!(
                "{}",
                ConduitError::Corrupt {
                    rank: src.rank,
                    detail: format!("ibv conduit: {e}")
                }
            ),
        };
        if h.category == Category::Long
            && (h.len > self.shape.max_medium
                || h.offset
                    .checked_add(h.len)
                    .is_none_or(|end| end > self.seg.1))
        {
            panic!(
                "{}",
                ConduitError::Corrupt {
                    rank: src.rank,
                    detail: format!(
                        "ibv conduit: a Long of {} bytes at {} outside the segment",
                        h.len, h.offset
                    )
                }
            );
        }
        let payload = if h.category == Category::Medium {
            &bytes[wire::HDR + 4 * h.nargs..]
        } else {
            &[][..]
        };
        let inc = Incoming {
            src,
            handler: h.handler,
            kind: h.kind,
            category: h.category,
            args: &args[..h.nargs],
            payload,
            offset: if h.category == Category::Long {
                h.offset
            } else {
                0
            },
            len: if h.category == Category::Long {
                h.len
            } else {
                0
            },
        };
        let before = self.deferred_total;
        {
            let mut tx = Tx { ep: self };
            d.deliver(&inc, &mut tx);
        }
        // Repost the buffer (the payload is no longer referenced).
        let sge = Sge {
            addr: self.res.recv.at(i * buf_len) as u64,
            len: buf_len as u32,
            lkey: V::lkey(&self.res.recv_mr),
        };
        // SAFETY: the buffer is no longer read; the NIC owns it until its next completion.
        if let Err(e) = unsafe { self.res.v.post_srq_recv(&self.res.srq, wc.wr_id, sge) } {
            panic!(
                "ibv conduit: rank {} endpoint {}: reposting a receive failed: {e}",
                self.rank, self.index
            );
        }
        if h.kind == Kind::Request && self.deferred_total > before {
            // The reply waits: its request's credit comes back when it leaves.
            if let Some(last) = self.peers[g as usize].deferred.back_mut() {
                last.release = true;
            }
        } else {
            self.consumed(g, h.kind);
        }
    }

    /// Takes what the completion queue holds: send completions are handled, receive
    /// completions stashed for `poll`.
    fn collect(&mut self) {
        let mut wcs = [Wc::EMPTY; 16];
        loop {
            let n = match self.res.v.poll_cq(&self.res.cq, &mut wcs) {
                Ok(n) => n,
                Err(e) => panic!(
                    "ibv conduit: rank {} endpoint {}: {e}",
                    self.rank, self.index
                ),
            };
            for wc in &wcs[..n] {
                self.completion(wc, None::<&mut NoDeliver>);
            }
            if n < wcs.len() {
                return;
            }
        }
    }

    /// Handles one completion; a receive is delivered through `d`, or stashed without one.
    fn completion<D: Deliver>(&mut self, wc: &Wc, d: Option<&mut D>) -> bool {
        if wc.status != WcStatus::Success {
            let g = wrid::peer(wc.wr_id) as usize;
            let known = wc.opcode != WcOpcode::Recv
                && self.peers.get(g).is_some_and(|p| p.failed.is_some());
            if !known {
                self.fail_peer(wc);
            }
            // The peer's failure was reported already (the rest of its queue is
            // flushed): release what the request held, without panicking again (a
            // panic unwinding through a wait polls the endpoint once more).
            self.send_done(wc);
            return false;
        }
        if wc.opcode == WcOpcode::Recv {
            match d {
                Some(d) => {
                    self.recv_done(wc, d);
                    return true;
                }
                None => self.stash.push_back(*wc),
            }
        } else {
            self.send_done(wc);
        }
        false
    }

    pub(crate) fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        self.poll_active(d, budget).0
    }

    /// `poll`, also telling whether the pass found any completion (`FarEp::poll_far`).
    pub(crate) fn poll_active<D: Deliver>(&mut self, d: &mut D, budget: usize) -> (usize, bool) {
        self.flush();
        let mut active = !self.stash.is_empty();
        let mut delivered = 0;
        while delivered < budget
            && let Some(wc) = self.stash.pop_front()
        {
            self.recv_done(&wc, d);
            delivered += 1;
        }
        let mut wcs = [Wc::EMPTY; 16];
        while delivered < budget {
            let n = match self.res.v.poll_cq(&self.res.cq, &mut wcs) {
                Ok(n) => n,
                Err(e) => panic!(
                    "ibv conduit: rank {} endpoint {}: {e}",
                    self.rank, self.index
                ),
            };
            active |= n > 0;
            for wc in &wcs[..n] {
                if self.completion(wc, Some(&mut *d)) {
                    delivered += 1;
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        if delivered > 0 {
            self.flush();
        }
        (delivered, active)
    }

    pub(crate) fn has_incoming(&self) -> bool {
        !self.stash.is_empty()
    }

    pub(crate) fn inject(&mut self, msg: &OutMsg<'_>) -> Result<Injected, ConduitError> {
        let Some(g) = self.g(msg.dst()) else {
            return Err(ConduitError::Contract(format!(
                "ibv: no endpoint {}",
                msg.dst()
            )));
        };
        if self.try_send(g, &Out::of(msg))? {
            Ok(Injected::Sent)
        } else {
            Ok(Injected::WouldBlock)
        }
    }

    /// Nothing waits that only this endpoint's polls send: no reply queued, no credit
    /// word owed (`ConduitEp::has_outgoing` is its negation).
    pub(crate) fn idle(&self) -> bool {
        self.deferred_total == 0 && !self.owed_credits
    }

    pub(crate) fn block(&mut self, timeout: Duration) {
        if !self.idle() || !self.stash.is_empty() {
            return;
        }
        // A connection completes on the channel's thread, which does not signal this
        // completion queue: adopt what is ready (the caller retries at once), else look
        // again soon.
        if !self.awaiting.is_empty() && self.check_awaiting() {
            return;
        }
        let timeout = if self.connecting() {
            timeout.min(Duration::from_millis(1))
        } else {
            timeout
        };
        // Send completions alone do not end the wait: take them first; arm the channel,
        // then look once more (a completion before arming signals nothing).
        self.collect();
        if !self.stash.is_empty() {
            return;
        }
        if let Err(e) = self.res.v.arm_cq(&self.res.cq) {
            panic!(
                "ibv conduit: rank {} endpoint {}: arming the completion channel: {e}",
                self.rank, self.index
            );
        }
        self.collect();
        if !self.stash.is_empty() {
            return;
        }
        if let Err(e) = self.res.v.wait_cq(&self.res.cq, timeout) {
            panic!(
                "ibv conduit: rank {} endpoint {}: waiting on the completion channel: {e}",
                self.rank, self.index
            );
        }
        self.collect();
    }

    pub(crate) fn in_flight(&self) -> bool {
        self.peers.iter().any(|p| p.sq_used > 0) || self.free_rma.len() < RMA_SLOTS
    }

    pub(crate) fn index(&self) -> EpIndex {
        self.index
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_args: MAX_ARGS,
            max_medium: self.shape.max_medium,
            max_long: self.shape.max_medium,
        }
    }

    pub(crate) fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::BLOCKING_WAIT;
        if self.shape.native_rma {
            c |= Capabilities::NATIVE_RMA;
        }
        if self.shape.native_atomics {
            c |= Capabilities::NATIVE_ATOMICS;
        }
        c
    }

    pub(crate) fn local_segment(&self) -> (NonNull<u8>, usize) {
        self.seg
    }

    pub(crate) fn describe(&self) -> String {
        let mut s = String::new();
        for p in &self.peers {
            let g = self.g(p.info.addr).unwrap_or(0);
            let req_out = p.sent_req - self.credits_back(g, Kind::Request);
            let rep_out = p.sent_rep - self.credits_back(g, Kind::Reply);
            if p.sq_used > 0
                || !p.deferred.is_empty()
                || req_out > 0
                || rep_out > 0
                || p.failed.is_some()
            {
                s.push_str(&format!(
                    "peer {}: {} work requests posted, {req_out}/{} request and {rep_out} reply credits in use, {} replies queued, {} + {} credits not yet returned{}\n",
                    p.info.addr,
                    p.sq_used,
                    self.shape.credits,
                    p.deferred.len(),
                    p.consumed_req - p.credited_req,
                    p.consumed_rep - p.credited_rep,
                    p.failed.as_deref().map(|f| format!(", failed: {f}")).unwrap_or_default()
                ));
            }
        }
        if self.free_slots.len() < self.shape.send_slots {
            s.push_str(&format!(
                "{} of {} send buffers in use\n",
                self.shape.send_slots - self.free_slots.len(),
                self.shape.send_slots
            ));
        }
        if self.free_rma.len() < RMA_SLOTS {
            s.push_str(&format!(
                "{} native operations in flight\n",
                RMA_SLOTS - self.free_rma.len()
            ));
        }
        let _ = self.recv_count;
        s
    }

    // ---- lazy wire-up (slow path) ----------------------------------------------------

    /// Peer `g` is not ready: asks the connection channel (which starts the connection
    /// if there is none) and adopts the queue pair once it is ready. `Ok(true)` when it
    /// is ready now.
    #[cold]
    fn connect(&mut self, g: u32) -> Result<bool, ConduitError> {
        let gi = g as usize;
        let addr = self.peers[gi].info.addr;
        if let Some(why) = &self.peers[gi].failed {
            return Err(ConduitError::PeerGone {
                rank: addr.rank,
                detail: why.clone(),
            });
        }
        let Some((ch, _)) = &self.chan else {
            // Eager wire-up connected every peer at open.
            return Err(ConduitError::Network(format!(
                "ibv: no queue pair to rank {} endpoint {}",
                addr.rank, addr.ep
            )));
        };
        match ch.connect(g) {
            Progress::Ready(qp) => {
                self.adopt(g, qp);
                Ok(true)
            }
            Progress::Pending => {
                if !self.awaiting.contains(&g) {
                    self.awaiting.push(g);
                }
                Ok(false)
            }
            Progress::Failed(why) => {
                self.awaiting.retain(|&x| x != g);
                self.peers[gi].failed = Some(why.clone());
                Err(ConduitError::PeerGone {
                    rank: addr.rank,
                    detail: why,
                })
            }
        }
    }

    /// Adopts the awaited connections that became ready (or failed); true if any did,
    /// so the caller's operations can go on.
    #[cold]
    fn check_awaiting(&mut self) -> bool {
        let mut changed = false;
        for g in std::mem::take(&mut self.awaiting) {
            changed |= !matches!(self.connect(g), Ok(false));
        }
        changed
    }

    /// Takes the ready queue pair `qp` of peer `g` from the channel.
    fn adopt(&mut self, g: u32, qp: Arc<V::Qp>) {
        self.awaiting.retain(|&x| x != g);
        self.by_qpn.insert(self.res.v.qp_addr(&qp).qpn, g);
        let p = &mut self.peers[g as usize];
        p.qp = Some(qp);
        p.ready = true;
    }

    /// A message on queue pair `qpn`, unknown so far: one the connection channel made
    /// for a peer that connected to us (its first message makes it ready).
    #[cold]
    fn adopt_qpn(&mut self, qpn: u32) -> Option<u32> {
        let (g, qp) = self.chan.as_ref()?.0.adopt_qpn(qpn)?;
        self.adopt(g, qp);
        Some(g)
    }

    /// Connections in progress, or ready and not yet adopted.
    pub(crate) fn connecting(&self) -> bool {
        !self.awaiting.is_empty() || self.chan.as_ref().is_some_and(|(c, _)| c.connecting())
    }

    // ---- native RMA and atomics ----------------------------------------------------

    /// A free operation slot for `wrs` work requests to peer `g`; `Ok(None)` for
    /// back-pressure (no slot, no send queue entry, or the connection not ready yet).
    fn rma_slot(&mut self, g: u32, wrs: u32) -> Result<Option<u32>, ConduitError> {
        if !self.peers[g as usize].ready && !self.connect(g)? {
            return Ok(None);
        }
        Ok(self.rma_slot_ready(g, wrs))
    }

    fn rma_slot_ready(&mut self, g: u32, wrs: u32) -> Option<u32> {
        let p = &self.peers[g as usize];
        if p.sq_used + wrs > self.shape.sq_depth() - self.shape.sq_reserve() {
            return None;
        }
        self.free_rma.pop()
    }

    /// The local buffer of slot `slot`'s operation of `len` bytes: its bounce buffer.
    fn bounce(&self, slot: u32, len: usize) -> Sge {
        Sge {
            addr: self.res.rma.at(slot as usize * RMA_CHUNK) as u64,
            len: len as u32,
            lkey: V::lkey(&self.res.rma_mr),
        }
    }

    /// Registers the caller's buffer of a transfer larger than a bounce buffer, for
    /// the operation in `slot` (deregistered at its completion); `None` if that fails.
    ///
    /// # Safety
    /// `ptr..ptr+len` valid until the operation completes.
    unsafe fn direct(
        &mut self,
        slot: u32,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Option<Sge> {
        if self.stats.registry.count.load(Ordering::Relaxed) > 0 || !self.rcache.is_empty() {
            if let Some(sge) = self.cached(slot, ptr as usize, len) {
                return Some(sge);
            }
        }
        // SAFETY: the caller keeps the buffer valid until completion, and the region is
        // dropped at completion (`rma_done`).
        let mr = unsafe { self.res.v.reg_mr(ptr, len, access) }.ok()?;
        let sge = Sge {
            addr: ptr as u64,
            len: len as u32,
            lkey: V::lkey(&mr),
        };
        self.op_mrs[slot as usize] = Some(mr);
        Some(sge)
    }

    /// The registration cache: a registration covering `ptr..ptr+len` of a buffer the
    /// application registered (made on first use, kept for the next), for the
    /// operation in `slot`; `None` when the range is in no registered buffer (or the
    /// cache is full of registrations in use).
    #[cold]
    fn cached(&mut self, slot: u32, ptr: usize, len: usize) -> Option<Sge> {
        let reg = &self.stats.registry;
        let generation = reg.generation.load(Ordering::Acquire);
        if generation != self.rcache_gen {
            // Buffers were unregistered: forget their registrations (now, or when the
            // last operation using one completes). Never used again either way.
            let entries = reg.entries.lock().unwrap_or_else(|e| e.into_inner());
            for c in &mut self.rcache {
                if !entries.iter().any(|e| e.id == c.id) {
                    c.dead = true;
                }
            }
            drop(entries);
            self.rcache.retain(|c| !c.dead || c.users > 0);
            self.rcache_gen = generation;
        }
        self.rcache_clock += 1;
        let clock = self.rcache_clock;
        let end = ptr.checked_add(len)?;
        if let Some(c) = self
            .rcache
            .iter_mut()
            .find(|c| !c.dead && c.addr <= ptr && end <= c.addr + c.len)
        {
            c.users += 1;
            c.last_use = clock;
            self.op_cached[slot as usize] = c.id;
            self.stats.reg_hits.fetch_add(1, Ordering::Relaxed);
            return Some(Sge {
                addr: ptr as u64,
                len: len as u32,
                lkey: V::lkey(&c.mr),
            });
        }
        // The lock is held while registering: the entry (so its guard, so the memory's
        // borrow) stays alive meanwhile.
        let entries = reg.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = *entries
            .iter()
            .find(|e| e.addr <= ptr && end <= e.addr + e.len)?;
        if self.rcache.len() >= self.shape.reg_cache {
            let victim = self
                .rcache
                .iter()
                .enumerate()
                .filter(|(_, c)| c.users == 0)
                .min_by_key(|(_, c)| c.last_use)
                .map(|(i, _)| i)?;
            self.rcache.swap_remove(victim);
            self.stats.reg_evictions.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the buffer is borrowed by its `Registered` guard while its entry is in
        // the registry (the guard removes it under this lock before the borrow ends);
        // the region has no remote rights, so after the entry is gone nothing accesses
        // the memory through it: this endpoint never names it in a new work request
        // (`dead`), and drops it once the requests naming it completed (the trait's
        // `reg_mr` contract for regions without remote rights).
        let mr = unsafe {
            self.res
                .v
                .reg_mr(e.addr as *mut u8, e.len, Access::LOCAL_WRITE)
        }
        .ok()?;
        drop(entries);
        self.stats.reg_misses.fetch_add(1, Ordering::Relaxed);
        let lkey = V::lkey(&mr);
        self.rcache.push(Cached {
            id: e.id,
            addr: e.addr,
            len: e.len,
            mr,
            users: 1,
            dead: false,
            last_use: clock,
        });
        self.op_cached[slot as usize] = e.id;
        Some(Sge {
            addr: ptr as u64,
            len: len as u32,
            lkey,
        })
    }

    /// Frees operation slot `slot` and what it held: its direct registration, its use
    /// of a cached one.
    fn release_slot(&mut self, slot: u32) {
        let s = slot as usize;
        self.op_mrs[s] = None;
        let id = std::mem::take(&mut self.op_cached[s]);
        if id != 0
            && let Some(i) = self.rcache.iter().position(|c| c.id == id)
        {
            let c = &mut self.rcache[i];
            c.users -= 1;
            if c.dead && c.users == 0 {
                self.rcache.swap_remove(i);
            }
        }
        self.free_rma.push(slot);
    }

    fn rma_post(&mut self, g: u32, slot: u32, op: SendOp, sge: Sge) -> Result<(), VerbsError> {
        let wr = SendWr {
            wr_id: wrid::make(wrid::RMA, g, slot),
            op,
            sge,
            signaled: true,
            inline: false,
        };
        // SAFETY: the slot's bounce buffer (or the caller's buffer, registered for this
        // operation) is used by this operation only until its completion.
        unsafe { self.post(g as usize, &wr) }?;
        self.peers[g as usize].sq_used += 1;
        Ok(())
    }

    fn rma_done(&mut self, slot: usize, status: WcStatus) {
        let Some(op) = self.rma_ops.get_mut(slot) else {
            return;
        };
        if !op.busy {
            return;
        }
        if status != WcStatus::Success {
            op.error = Some(status);
        }
        op.left = op.left.saturating_sub(1);
        if op.left > 0 {
            return;
        }
        let op = *op;
        if op.error.is_none() {
            if op.len > 0 {
                // SAFETY: the get's bounce buffer holds the bytes (its READ completed);
                // `out` is the caller's buffer, valid and unaccessed until this operation
                // completes (`native_get`'s contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.res.rma.at(slot * RMA_CHUNK),
                        op.out as *mut u8,
                        op.len,
                    )
                };
            }
            if op.atomic.is_some() && op.result != 0 {
                // SAFETY: the fetched word is in the bounce buffer (its atomic completed).
                let old =
                    unsafe { std::ptr::read(self.res.rma.at(slot * RMA_CHUNK).cast::<u64>()) };
                // SAFETY: `result` is valid for a u64 write until completion (`native_atomic`'s contract).
                unsafe { std::ptr::write_unaligned(op.result as *mut u64, old) };
            }
        }
        self.done_tickets.push(op.ticket);
        self.rma_ops[slot].busy = false;
        // A directly registered buffer is deregistered once the NIC is done with it; a
        // cached registration is released.
        self.release_slot(slot as u32);
    }

    fn start(&mut self, slot: u32, left: u32) -> u64 {
        let t = self.next_ticket;
        self.next_ticket += 1;
        self.rma_ops[slot as usize] = RmaOp {
            busy: true,
            ticket: t,
            left,
            ..RmaOp::default()
        };
        t
    }

    /// A put of at most one chunk, or `None` for the caller's AM path.
    ///
    /// # Safety
    /// `src..src+len` valid for reads during the call.
    pub(crate) unsafe fn native_put(
        &mut self,
        dst: EpAddr,
        offset: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Native, ConduitError> {
        let Some(g) = self.g(dst) else {
            return Ok(Native::Unsupported);
        };
        let p = self.peers[g as usize].info;
        if !self.shape.native_rma
            || len > MAX_TRANSFER
            || offset.checked_add(len).is_none_or(|e| e > p.seg_len)
        {
            return Ok(Native::Unsupported);
        }
        if let Some(why) = &self.peers[g as usize].failed {
            return Err(ConduitError::PeerGone {
                rank: dst.rank,
                detail: why.clone(),
            });
        }
        let Some(slot) = self.rma_slot(g, 1)? else {
            return Ok(Native::WouldBlock);
        };
        let sge = if len <= RMA_CHUNK {
            // SAFETY: the caller's buffer is readable (contract); the slot's bounce
            // buffer is free and RMA_CHUNK long.
            unsafe {
                std::ptr::copy_nonoverlapping(src, self.res.rma.at(slot as usize * RMA_CHUNK), len)
            };
            self.bounce(slot, len)
        } else {
            // SAFETY: the caller keeps `src` valid and unmodified until completion.
            match unsafe { self.direct(slot, src.cast_mut(), len, Access::empty()) } {
                Some(sge) => sge,
                None => {
                    self.release_slot(slot);
                    return Ok(Native::Unsupported);
                }
            }
        };
        let op = SendOp::Write {
            remote_addr: p.seg_addr + offset as u64,
            rkey: p.seg_rkey,
        };
        match self.rma_post(g, slot, op, sge) {
            Ok(()) => {
                self.stats.puts.fetch_add(1, Ordering::Relaxed);
                Ok(Native::Pending(self.start(slot, 1)))
            }
            Err(VerbsError::QueueFull) => {
                self.release_slot(slot);
                Ok(Native::WouldBlock)
            }
            Err(e) => {
                self.release_slot(slot);
                Err(verr(dst, "RDMA WRITE", e))
            }
        }
    }

    /// A get of at most one chunk.
    ///
    /// # Safety
    /// `out..out+len` valid for writes and unaccessed until completion.
    pub(crate) unsafe fn native_get(
        &mut self,
        dst: EpAddr,
        offset: usize,
        out: *mut u8,
        len: usize,
    ) -> Result<Native, ConduitError> {
        let Some(g) = self.g(dst) else {
            return Ok(Native::Unsupported);
        };
        let p = self.peers[g as usize].info;
        if !self.shape.native_rma
            || len > MAX_TRANSFER
            || offset.checked_add(len).is_none_or(|e| e > p.seg_len)
        {
            return Ok(Native::Unsupported);
        }
        if let Some(why) = &self.peers[g as usize].failed {
            return Err(ConduitError::PeerGone {
                rank: dst.rank,
                detail: why.clone(),
            });
        }
        let Some(slot) = self.rma_slot(g, 1)? else {
            return Ok(Native::WouldBlock);
        };
        let bounced = len <= RMA_CHUNK;
        let sge = if bounced {
            self.bounce(slot, len)
        } else {
            // SAFETY: the caller keeps `out` valid and unaccessed until completion.
            match unsafe { self.direct(slot, out, len, Access::LOCAL_WRITE) } {
                Some(sge) => sge,
                None => {
                    self.release_slot(slot);
                    return Ok(Native::Unsupported);
                }
            }
        };
        let op = SendOp::Read {
            remote_addr: p.seg_addr + offset as u64,
            rkey: p.seg_rkey,
        };
        match self.rma_post(g, slot, op, sge) {
            Ok(()) => {
                self.stats.gets.fetch_add(1, Ordering::Relaxed);
                let t = self.start(slot, 1);
                let o = &mut self.rma_ops[slot as usize];
                if bounced {
                    o.out = out as usize;
                    o.len = len;
                }
                Ok(Native::Pending(t))
            }
            Err(VerbsError::QueueFull) => {
                self.release_slot(slot);
                Ok(Native::WouldBlock)
            }
            Err(e) => {
                self.release_slot(slot);
                Err(verr(dst, "RDMA READ", e))
            }
        }
    }

    pub(crate) fn native_atomic_supported(
        &self,
        kind: AtomicKind,
        base: AtomicBase,
        fetch: bool,
    ) -> bool {
        let _ = fetch;
        self.shape.native_atomics
            && matches!(kind, AtomicKind::I64 | AtomicKind::U64)
            && matches!(
                base,
                AtomicBase::Add
                    | AtomicBase::Sub
                    | AtomicBase::Inc
                    | AtomicBase::Dec
                    | AtomicBase::Get
                    | AtomicBase::Cswap
            )
    }

    /// # Safety
    /// `result` valid for a u64 write until completion (or null when not fetching).
    pub(crate) unsafe fn native_atomic(
        &mut self,
        dst: EpAddr,
        offset: usize,
        op: &NativeAtomic,
        result: *mut u64,
    ) -> Result<Native, ConduitError> {
        if !self.native_atomic_supported(op.kind, op.base, op.fetch) {
            return Ok(Native::Unsupported);
        }
        let Some(g) = self.g(dst) else {
            return Ok(Native::Unsupported);
        };
        let p = self.peers[g as usize].info;
        if offset % 8 != 0 || offset.checked_add(8).is_none_or(|e| e > p.seg_len) {
            return Ok(Native::Unsupported);
        }
        if let Some(why) = &self.peers[g as usize].failed {
            return Err(ConduitError::PeerGone {
                rank: dst.rank,
                detail: why.clone(),
            });
        }
        let Some(slot) = self.rma_slot(g, 1)? else {
            return Ok(Native::WouldBlock);
        };
        let (remote_addr, rkey) = (p.seg_addr + offset as u64, p.seg_rkey);
        let vop = match op.base {
            AtomicBase::Add => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: op.a,
            },
            AtomicBase::Sub => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: op.a.wrapping_neg(),
            },
            AtomicBase::Inc => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: 1,
            },
            AtomicBase::Dec => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: u64::MAX,
            },
            AtomicBase::Get => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: 0,
            },
            AtomicBase::Cswap => SendOp::CmpSwap {
                remote_addr,
                rkey,
                compare: op.a,
                swap: op.b,
            },
            _ => {
                self.release_slot(slot);
                return Ok(Native::Unsupported);
            }
        };
        let sge = self.bounce(slot, 8);
        match self.rma_post(g, slot, vop, sge) {
            Ok(()) => {
                self.stats.atomics.fetch_add(1, Ordering::Relaxed);
                let t = self.start(slot, 1);
                let o = &mut self.rma_ops[slot as usize];
                o.atomic = Some(*op);
                o.result = if op.fetch { result as usize } else { 0 };
                Ok(Native::Pending(t))
            }
            Err(VerbsError::QueueFull) => {
                self.release_slot(slot);
                Ok(Native::WouldBlock)
            }
            Err(e) => {
                self.release_slot(slot);
                Err(verr(dst, "atomic", e))
            }
        }
    }

    pub(crate) fn native_test(&mut self, ticket: u64) -> bool {
        if let Some(i) = self.done_tickets.iter().position(|&t| t == ticket) {
            self.done_tickets.swap_remove(i);
            return true;
        }
        false
    }
}

/// The `Deliver` of `collect`, which never delivers.
struct NoDeliver;
impl Deliver for NoDeliver {
    fn deliver(&mut self, _: &Incoming<'_>, _: &mut dyn ReplyTx) {}
}

/// The reply half handed to `deliver`.
struct Tx<'a, V: Verbs> {
    ep: &'a mut Ep<V>,
}

impl<V: Verbs> ReplyTx for Tx<'_, V> {
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        let Some(g) = self.ep.g(msg.dst()) else {
            return Err(ConduitError::Contract(format!(
                "ibv: no endpoint {}",
                msg.dst()
            )));
        };
        let out = Out::of(msg);
        if self.ep.peers[g as usize].deferred.is_empty() && self.ep.try_send(g, &out)? {
            return Ok(());
        }
        self.ep.defer_reply(g, &out);
        Ok(())
    }
}
