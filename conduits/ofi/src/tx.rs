//! The sending half of an endpoint: AM requests and replies as libfabric messages
//! (`fi_inject` when small, else `fi_send` from a bounce buffer), request credits per
//! peer, replies queued when they cannot leave at once (replies never block), owed
//! credits returned in credit-only messages, and liveness probes of silent peers.
//!
//! # Safety
//! A bounce buffer is written only while it is on the free list (libfabric does not
//! hold it); from the moment it is posted with `fi_send` until its send completion is
//! read (`Tx::sent`), neither it nor its context slot is touched or reused.
#![allow(unsafe_code)]

use crate::config::{PROBE_DEADLINE, SEND_BUFS};
use crate::fabric::{EpHandle, Errno};
use crate::mem::Pool;
use crate::runtime::Reach;
use crate::wire::{self, Credits, HEADER};
use gex_core::EpAddr;
use gex_core::spi::{ConduitError, OutMsg, ReplyTx};
use gex_sync::atomic::{AtomicUsize, Ordering};
use gex_sync::ring;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

/// Sending half of an endpoint (also the [`ReplyTx`] handed to handlers).
#[derive(Debug)]
pub(crate) struct Tx {
    pub(crate) h: EpHandle,
    pub(crate) rank: u32,
    pub(crate) index: u16,
    pub(crate) g_base: Vec<usize>,
    pub(crate) addrs: Vec<u64>,
    pub(crate) inject_max: usize,
    pub(crate) pool: Pool,
    pub(crate) free: Vec<u32>,
    pub(crate) credits: Credits,
    /// Replies that could not leave at once, per destination (FIFO).
    pub(crate) queued: Vec<VecDeque<Vec<u8>>>,
    pub(crate) nqueued: usize,
    /// Destinations that may be owed a credit-only message.
    pub(crate) due: Vec<usize>,
    pub(crate) in_due: Vec<bool>,
    pub(crate) scratch: Vec<u8>,
    pub(crate) fatal: Option<String>,
    pub(crate) who: Arc<str>,
    /// Progress passes in a row that found nothing (see `PROBE_AFTER`).
    pub(crate) idle: u32,
    /// Whether liveness probes are sent (not with `shm`: a dead peer's queue takes
    /// messages until it is full, and a full queue of a live peer that computes
    /// without polling would look the same).
    pub(crate) probing: bool,
    /// Per send buffer: 1 + the endpoint its pending liveness probe went to, or 0.
    pub(crate) probe_buf: Vec<u32>,
    /// Per endpoint: when its pending liveness probe was first tried, and whether the
    /// provider accepted it ([`Tx::probe`]).
    pub(crate) probe_since: Vec<Option<(Instant, bool)>>,
    /// Per endpoint: how far requests to it are possible (endpoints made at run time
    /// are found on first contact: `crate::runtime`).
    pub(crate) reach: Vec<Reach>,
    /// Control messages that could not leave at once (destination, whole message),
    /// sent from `poll` in order.
    pub(crate) ctl: VecDeque<(usize, Vec<u8>)>,
    /// The in-process path to endpoints of this rank (see [`LocalPath`]).
    pub(crate) local: LocalPath,
}

/// The in-process path of an endpoint: messages between two endpoints of this rank of
/// which at least one was made at run time go through a single-producer ring per
/// ordered pair (`gex_sync::ring`), made by the sender at first contact and handed to
/// the receiver through the rank's [`LocalHub`]; not through the provider, whose
/// connection handshake would need the receiver's progress before a first message can
/// leave (a thread that holds both endpoints would wait for itself).
#[derive(Debug, Default)]
pub(crate) struct LocalPath {
    /// The rank's hub (`None`: no in-process path, e.g. without endpoints made at run time).
    pub(crate) hub: Option<Arc<LocalHub>>,
    /// Global number of this rank's endpoint 0, and this rank's capacity.
    pub(crate) lo: usize,
    pub(crate) cap: usize,
    /// Endpoints made at init of this rank.
    pub(crate) init: usize,
    /// Whether this endpoint was made at run time.
    pub(crate) runtime: bool,
    /// Rings to this rank's endpoints, by index (made at first contact).
    pub(crate) out: Vec<Option<ring::Producer>>,
}

impl LocalPath {
    /// This rank's endpoint index of `g` if messages to it take the in-process path.
    #[inline(always)]
    pub(crate) fn index_of(&self, g: usize) -> Option<usize> {
        let i = g.wrapping_sub(self.lo);
        (i < self.cap && (self.runtime || i >= self.init)).then_some(i)
    }
}

/// Where a rank's endpoints hand each other the receiving ends of their rings: per
/// receiving endpoint, the rings offered and not yet taken, and how many were offered
/// (the receiver's `poll` compares it with the number it took: one load).
#[derive(Debug)]
pub(crate) struct LocalHub {
    pub(crate) handoff: Vec<Mutex<Vec<ring::Consumer>>>,
    pub(crate) offered: Vec<AtomicUsize>,
    /// Data bytes of each ring.
    pub(crate) ring_cap: usize,
}

impl LocalHub {
    /// A hub for `cap` endpoints whose largest message is `stride` bytes.
    pub(crate) fn new(cap: usize, stride: usize) -> LocalHub {
        LocalHub {
            handoff: (0..cap).map(|_| Mutex::new(Vec::new())).collect(),
            offered: (0..cap).map(|_| AtomicUsize::new(0)).collect(),
            ring_cap: (stride * 16).next_power_of_two().max(1 << 16),
        }
    }
}

impl Tx {
    /// The sending half of endpoint `index` of `rank`: `addrs` are the peers' addresses
    /// in this endpoint's AV (by global endpoint number), `pool` its bounce buffers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        h: EpHandle,
        rank: u32,
        index: u16,
        g_base: Vec<usize>,
        addrs: Vec<u64>,
        inject_max: usize,
        pool: Pool,
        window: u16,
        who: Arc<str>,
        probing: bool,
    ) -> Tx {
        let total = addrs.len();
        Tx {
            h,
            rank,
            index,
            g_base,
            addrs,
            inject_max,
            free: (0..SEND_BUFS as u32).rev().collect(),
            scratch: Vec::with_capacity(inject_max.min(pool.stride)),
            pool,
            credits: Credits::new(total, window),
            queued: (0..total).map(|_| VecDeque::new()).collect(),
            nqueued: 0,
            due: Vec::new(),
            in_due: vec![false; total],
            fatal: None,
            who,
            idle: 0,
            probing,
            probe_buf: vec![0; SEND_BUFS],
            probe_since: vec![None; total],
            reach: vec![Reach::Ready; total],
            ctl: VecDeque::new(),
            local: LocalPath::default(),
        }
    }

    /// Whether every send buffer is back (no send of this endpoint in flight).
    #[inline(always)]
    pub(crate) fn all_sent(&self) -> bool {
        self.free.len() == SEND_BUFS
    }

    /// Whether credits are owed to some peer that a credit-only message should return
    /// now (half a window or more).
    pub(crate) fn credits_due(&self) -> bool {
        self.due.iter().any(|&g| self.credits.due(g))
    }
}

impl Tx {
    #[inline(always)]
    pub(crate) fn g(&self, dst: EpAddr) -> usize {
        self.g_base[dst.rank as usize] + dst.ep as usize
    }

    /// Names global endpoint `g` in messages: `rank R EP E`.
    #[cold]
    pub(crate) fn peer(&self, g: usize) -> String {
        let r = self.g_base.partition_point(|&b| b <= g).saturating_sub(1);
        format!(
            "rank {r} EP {}",
            g - self.g_base.get(r).copied().unwrap_or(0)
        )
    }

    #[cold]
    pub(crate) fn fail(&mut self, what: String, e: Errno) -> ConduitError {
        let msg = format!("{}: {what}: {e}", self.who);
        if self.fatal.is_none() {
            self.fatal = Some(msg.clone());
        }
        ConduitError::Network(msg)
    }

    /// Sends one message of `len` bytes built by `build` to `g`, with the credits owed
    /// to `g`. `Ok(false)`: no resources now (nothing sent, nothing changed).
    #[inline]
    pub(crate) fn send_now(
        &mut self,
        g: usize,
        len: usize,
        build: impl FnOnce(&mut [u8]),
    ) -> Result<bool, ConduitError> {
        if let Some(i) = self.local.index_of(g) {
            return Ok(self.send_local(i, g, len, build));
        }
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
                Err(e) => {
                    Err(self.fail(format!("fi_inject of {len} bytes to {}", self.peer(g)), e))
                }
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
                Err(self.fail(format!("fi_send of {len} bytes to {}", self.peer(g)), e))
            }
        }
    }

    /// [`send_now`](Self::send_now) on the in-process path to this rank's endpoint `i`
    /// (global number `g`): into the ring to it, made now at first contact. `false`:
    /// the ring is full.
    #[inline]
    fn send_local(
        &mut self,
        i: usize,
        g: usize,
        len: usize,
        build: impl FnOnce(&mut [u8]),
    ) -> bool {
        let credits = self.credits.returnable(g);
        let l = &mut self.local;
        let Some(hub) = &l.hub else {
            return false;
        };
        let p = l.out[i].get_or_insert_with(|| {
            let (p, c) = ring::channel(hub.ring_cap);
            hub.handoff[i]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(c);
            hub.offered[i].fetch_add(1, Ordering::Release);
            p
        });
        let Some(mut r) = p.reserve(len) else {
            return false;
        };
        let b = &mut r.body()[..len];
        build(b);
        wire::set_credits(b, credits);
        r.commit(0, len);
        self.credits.sent_back(g, credits);
        true
    }

    #[inline]
    pub(crate) fn send_msg(&mut self, g: usize, msg: &OutMsg<'_>) -> Result<bool, ConduitError> {
        let len = wire::wire_len(msg.category(), msg.args().len(), msg.payload().len());
        let (rank, index) = (self.rank, self.index);
        self.send_now(g, len, |b| encode_msg(b, rank, index, msg))
    }

    /// Sends queued replies, oldest first, while resources last.
    #[cold]
    pub(crate) fn flush(&mut self) -> Result<(), ConduitError> {
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
    pub(crate) fn mark_due(&mut self, g: usize) {
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
    /// still refused with `-FI_EAGAIN`, after `PROBE_DEADLINE` (or one that completes
    /// in error) means the peer is gone.
    #[cold]
    pub(crate) fn probe(&mut self, own: usize) -> Result<(), ConduitError> {
        for g in 0..self.queued.len() {
            if g == own || self.local.index_of(g).is_some() {
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
                        "{}: {} is unreachable: a liveness probe first tried {:?} ago has not completed while requests to it are outstanding (its process may have exited; the provider retries the connection in silence)",
                        self.who,
                        self.peer(g),
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
                    return Err(self.fail(format!("fi_send of a probe to {}", self.peer(g)), e));
                }
            }
        }
        Ok(())
    }

    /// Send buffer `i` completed: back on the free list (and its probe, if it carried
    /// one, answered).
    #[inline(always)]
    pub(crate) fn sent(&mut self, i: usize) {
        if self.probe_buf[i] != 0 {
            self.probe_since[self.probe_buf[i] as usize - 1] = None;
            self.probe_buf[i] = 0;
        }
        self.free.push(i as u32);
    }

    /// Sends credit-only messages where half a window is owed.
    pub(crate) fn return_credits(&mut self) -> Result<(), ConduitError> {
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
        encode_msg(&mut v, self.rank, self.index, msg);
        self.queued[g].push_back(v);
        self.nqueued += 1;
        self.credits.hold(g);
        Ok(())
    }
}

/// Encodes `msg` of rank `rank`'s endpoint `index` into `b` (`wire::wire_len` of it).
#[inline]
fn encode_msg(b: &mut [u8], rank: u32, index: u16, msg: &OutMsg<'_>) {
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
}
