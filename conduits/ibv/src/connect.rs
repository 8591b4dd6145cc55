//! The lazy wire-up's connection channel ([`Channel`]): one UD queue pair per endpoint,
//! served by a thread of its own, over which the RC queue pair of each pair of
//! endpoints is made on first contact.
//!
//! # Protocol
//! The first message or native operation of an endpoint to a peer endpoint creates our
//! RC queue pair for it and sends a CONNECT datagram carrying its address; the peer
//! creates its own, connects it (INIT, RTR, RTS) and answers ACCEPT with its address;
//! the initiator connects and answers READY. Until a side may send (initiator: ACCEPT
//! received; acceptor: READY, or the first message on the RC queue pair) operations to
//! that peer answer back-pressure. Datagrams may be lost or duplicated: CONNECT and
//! ACCEPT are sent again on a doubling timer, every answer is idempotent (the queue pair
//! of a pair and its address never change), and a connection an operation waits for
//! that does not complete within `GEX_IBV_CONNECT_TIMEOUT` fails the peer with an error
//! naming it. Both sides initiating at once: the endpoint with the lower global index
//! ignores the other's CONNECT (its own wins), the higher one accepts.
//!
//! # Threads
//! The channel's thread receives the datagrams and runs the timers, so a peer that does
//! not poll its endpoint (a passive target of RDMA) still answers. The endpoint's owner
//! only starts connections and adopts the queue pairs that became ready (`connect`,
//! `adopt_qpn`). Per peer state is under one lock per peer ([`Slot`]); UD sends are
//! serialised by the address-handle table's lock (taken inside a slot's lock, never
//! the other way round); the timer list's lock is taken alone or inside a slot's.
//!
//! # Safety
//! The UD receive buffers are registered in `mr` for as long as the channel lives
//! (field order: the queue pairs, then the region, then the block) and each is read
//! only after its completion was polled and before it is posted again, by the channel's
//! thread alone. UD sends are inline (copied during the post).
#![allow(unsafe_code)]

use crate::mem::Mem;
use crate::verbs::{
    Access, ConnectParams, GRH_LEN, QpAddr, QpCaps, Sge, UdDest, Verbs, VerbsError, Wc, WcStatus,
};
use crate::wire::{conn, wrid};
use gex_core::{EpAddr, EpIndex};
use gex_sync::atomic::{AtomicBool, Ordering};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Q_Key of the connection channel's UD queue pairs.
pub(crate) const QKEY: u32 = 0x6765_7851;
/// Receives posted on the UD queue pair.
pub(crate) const UD_RECVS: usize = 64;
/// Bytes of one UD receive buffer (the GRH and a connection datagram).
const UD_BUF: usize = 128;
/// First retransmission delay of CONNECT and ACCEPT (it doubles, up to [`RETX_MAX`]).
const RETX_FIRST: Duration = Duration::from_millis(20);
/// Longest retransmission delay.
const RETX_MAX: Duration = Duration::from_millis(500);
/// How long the thread sleeps at most without a timer due (it looks at `stop` then).
const IDLE_WAKE: Duration = Duration::from_millis(50);

/// Where the connection to a peer endpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// No queue pair yet.
    Idle,
    /// Ours is made, CONNECT sent, no answer yet.
    Connecting,
    /// Ours is connected to theirs (ACCEPT sent); waiting for READY or their first
    /// message before sending.
    Accepted,
    /// Both connected: sends go.
    Ready,
}

/// A connection's retransmission timer and deadline.
#[derive(Clone, Copy, Debug)]
struct Timer {
    since: Instant,
    next: Instant,
    interval: Duration,
    /// An operation of the owner waits for the connection (an acceptor's connection no
    /// one waits for is not failed at the deadline: its timer just stops).
    waited: bool,
}

/// One peer endpoint's connection.
struct Slot<V: Verbs> {
    state: State,
    qp: Option<Arc<V::Qp>>,
    /// The peer's queue pair address, once known.
    remote: Option<QpAddr>,
    failed: Option<String>,
    timer: Option<Timer>,
}

/// What the channel needs to know of its endpoint and the job.
pub(crate) struct Params {
    /// This endpoint's global index.
    pub(crate) me: u32,
    pub(crate) rank: u32,
    pub(crate) index: EpIndex,
    /// Each peer endpoint's address (by global index).
    pub(crate) addrs: Vec<EpAddr>,
    /// Each peer endpoint's UD queue pair (from the exchange at open).
    pub(crate) ud_peers: Vec<QpAddr>,
    pub(crate) caps: QpCaps,
    pub(crate) gid_index: u8,
    pub(crate) timeout: Duration,
}

/// The connection channel of one endpoint (see the [module documentation](self)).
/// Dropped in field order: the RC queue pairs it holds, the UD queue pair, the address
/// handles and the UD completion queue after it, the receive region before its block;
/// the endpoint's device, completion queue and shared receive queue last (shared with
/// the endpoint, which drops its own references after the channel's).
pub(crate) struct Channel<V: Verbs> {
    slots: Vec<Mutex<Slot<V>>>,
    by_qpn: Mutex<HashMap<u32, u32>>,
    /// Peers with a timer running.
    timers: Mutex<Vec<u32>>,
    ud: V::UdQp,
    /// The address handles made so far; its lock serialises UD sends.
    ahs: Mutex<Vec<Option<V::Ah>>>,
    ud_cq: V::Cq,
    mr: V::Mr,
    mem: Mem,
    p: Params,
    stop: AtomicBool,
    cq: Arc<V::Cq>,
    srq: Arc<V::Srq>,
    v: Arc<V>,
}

/// The UD queue pair and its buffers, made at open before the exchange.
pub(crate) struct UdParts<V: Verbs> {
    ud: V::UdQp,
    ud_cq: V::Cq,
    mr: V::Mr,
    mem: Mem,
}

impl<V: Verbs> UdParts<V> {
    /// Creates the UD queue pair with its own completion queue and posts its receives.
    pub(crate) fn new(v: &V) -> Result<Self, String> {
        let e = |what: &str, e: VerbsError| format!("{what}: {e}");
        let ud_cq = v
            .create_cq(2 * UD_RECVS as u32 + 16)
            .map_err(|x| e("ibv_create_cq (UD)", x))?;
        let caps = QpCaps {
            max_send_wr: UD_RECVS as u32,
            max_inline: conn::LEN.next_multiple_of(64) as u32,
        };
        let ud = v
            .create_ud_qp(&ud_cq, caps, UD_RECVS as u32, QKEY)
            .map_err(|x| e("creating the UD queue pair", x))?;
        let mem = Mem::new(UD_RECVS * UD_BUF).ok_or("cannot allocate UD receive buffers")?;
        // SAFETY: the block lives next to its region (`UdParts`, then `Channel`), dropped
        // after it and after the queue pair (field order).
        let mr = unsafe { v.reg_mr(mem.at(0), mem.len(), Access::LOCAL_WRITE) }
            .map_err(|x| e("registering UD receive buffers", x))?;
        let parts = UdParts { ud, ud_cq, mr, mem };
        for i in 0..UD_RECVS {
            // SAFETY: a buffer of the registered block, not accessed until its
            // completion is polled.
            unsafe { parts.post_recv(v, i) }.map_err(|x| e("ibv_post_recv", x))?;
        }
        Ok(parts)
    }

    /// Posts receive buffer `i`.
    ///
    /// # Safety
    /// Buffer `i` is not in use (never posted, or its completion was polled and it is
    /// no longer read).
    unsafe fn post_recv(&self, v: &V, i: usize) -> Result<(), VerbsError> {
        let sge = Sge {
            addr: self.mem.at(i * UD_BUF) as u64,
            len: UD_BUF as u32,
            lkey: V::lkey(&self.mr),
        };
        // SAFETY: the caller's promise; the buffer is inside the registered block.
        unsafe { v.post_ud_recv(&self.ud, wrid::make(wrid::UD_RECV, 0, i as u32), sge) }
    }

    /// The UD queue pair's address, to publish.
    pub(crate) fn addr(&self, v: &V) -> QpAddr {
        v.ud_addr(&self.ud)
    }
}

/// What `Channel::connect` tells the owner.
pub(crate) enum Progress<Q> {
    /// Connected: this queue pair, ready to send on.
    Ready(Arc<Q>),
    /// In progress: back-pressure.
    Pending,
    /// Failed: why.
    Failed(String),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<V: Verbs> Channel<V> {
    /// The channel of an endpoint whose device, completion queue and shared receive
    /// queue are `v`, `cq`, `srq`.
    pub(crate) fn new(
        parts: UdParts<V>,
        p: Params,
        v: Arc<V>,
        cq: Arc<V::Cq>,
        srq: Arc<V::Srq>,
    ) -> Self {
        let n = p.addrs.len();
        Channel {
            slots: (0..n)
                .map(|_| {
                    Mutex::new(Slot {
                        state: State::Idle,
                        qp: None,
                        remote: None,
                        failed: None,
                        timer: None,
                    })
                })
                .collect(),
            by_qpn: Mutex::new(HashMap::new()),
            timers: Mutex::new(Vec::new()),
            ud: parts.ud,
            ahs: Mutex::new((0..n).map(|_| None).collect()),
            ud_cq: parts.ud_cq,
            mr: parts.mr,
            mem: parts.mem,
            p,
            stop: AtomicBool::new(false),
            cq,
            srq,
            v,
        }
    }

    /// Starts the thread serving the channel; it ends after [`stop`](Self::stop).
    pub(crate) fn spawn(self: &Arc<Self>) -> Result<std::thread::JoinHandle<()>, String> {
        let ch = self.clone();
        std::thread::Builder::new()
            .name("gex-ibv-connect".into())
            .spawn(move || ch.serve())
            .map_err(|e| format!("starting the connection thread: {e}"))
    }

    /// Asks the thread to end (it does within [`IDLE_WAKE`]).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The owner wants to send to peer `g`: starts the connection if there is none,
    /// and reports where it is.
    pub(crate) fn connect(&self, g: u32) -> Progress<V::Qp> {
        let gi = g as usize;
        let mut s = lock(&self.slots[gi]);
        if let Some(why) = &s.failed {
            return Progress::Failed(why.clone());
        }
        match s.state {
            State::Ready => {
                return Progress::Ready(s.qp.clone().expect("a ready slot has its queue pair"));
            }
            State::Connecting | State::Accepted => {
                match &mut s.timer {
                    Some(t) => t.waited = true,
                    None => {
                        // The acceptor's timer stopped (nobody waited then): a new
                        // deadline, and the datagram again.
                        self.start_timer(g, &mut s, true);
                        let kind = if s.state == State::Connecting {
                            conn::CONNECT
                        } else {
                            conn::ACCEPT
                        };
                        self.send(g, &s, kind);
                    }
                }
                return Progress::Pending;
            }
            State::Idle => {}
        }
        let mine = match self.make_qp(g, &mut s) {
            Ok(a) => a,
            Err(e) => return self.fail(&mut s, e),
        };
        if g == self.p.me {
            // Our own endpoint: the queue pair loops back to itself.
            if let Err(e) = self.connect_qp(&mut s, &mine) {
                return self.fail(&mut s, e);
            }
            s.state = State::Ready;
            return Progress::Ready(s.qp.clone().expect("made above"));
        }
        s.state = State::Connecting;
        self.start_timer(g, &mut s, true);
        self.send(g, &s, conn::CONNECT);
        Progress::Pending
    }

    /// A message arrived on queue pair `qpn`, which the owner does not know: the
    /// queue pair the channel made for a peer that connected to us. Returns the peer
    /// and the queue pair, now ready (its first message is the acceptor's READY).
    pub(crate) fn adopt_qpn(&self, qpn: u32) -> Option<(u32, Arc<V::Qp>)> {
        let g = *lock(&self.by_qpn).get(&qpn)?;
        let mut s = lock(&self.slots[g as usize]);
        let qp = s.qp.clone()?;
        if s.state == State::Accepted {
            s.state = State::Ready;
            s.timer = None;
        }
        Some((g, qp))
    }

    /// Whether connections are in progress.
    pub(crate) fn connecting(&self) -> bool {
        !lock(&self.timers).is_empty()
    }

    fn fail(&self, s: &mut Slot<V>, why: String) -> Progress<V::Qp> {
        s.failed = Some(why.clone());
        s.timer = None;
        Progress::Failed(why)
    }

    /// Creates our RC queue pair for peer `g` if there is none; its address.
    fn make_qp(&self, g: u32, s: &mut Slot<V>) -> Result<QpAddr, String> {
        if let Some(qp) = &s.qp {
            return Ok(self.v.qp_addr(qp));
        }
        let qp = self
            .v
            .create_qp(&self.cq, &self.srq, self.p.caps)
            .map_err(|e| self.err(g, "creating the queue pair", e))?;
        let a = self.v.qp_addr(&qp);
        lock(&self.by_qpn).insert(a.qpn, g);
        s.qp = Some(Arc::new(qp));
        Ok(a)
    }

    /// Connects our queue pair of slot `s` to `remote` (INIT, RTR, RTS).
    fn connect_qp(&self, s: &mut Slot<V>, remote: &QpAddr) -> Result<(), String> {
        let params = ConnectParams {
            retry_cnt: 7,
            rnr_retry: 7,
            gid_index: self.p.gid_index,
        };
        let qp = s.qp.as_ref().expect("made before connecting");
        self.v.connect(qp, remote, &params).map_err(|e| {
            format!(
                "ibv: connecting the queue pair of rank {} endpoint {}: {e}",
                self.p.rank, self.p.index
            )
        })?;
        s.remote = Some(*remote);
        Ok(())
    }

    fn err(&self, g: u32, what: &str, e: VerbsError) -> String {
        let a = self.p.addrs[g as usize];
        format!(
            "ibv: rank {} endpoint {}: {what} to rank {} endpoint {}: {e}",
            self.p.rank, self.p.index, a.rank, a.ep
        )
    }

    fn start_timer(&self, g: u32, s: &mut Slot<V>, waited: bool) {
        let now = Instant::now();
        s.timer = Some(Timer {
            since: now,
            next: now + RETX_FIRST,
            interval: RETX_FIRST,
            waited,
        });
        let mut t = lock(&self.timers);
        if !t.contains(&g) {
            t.push(g);
        }
    }

    /// Sends connection datagram `kind` to peer `g` (lost if the send queue is full:
    /// the timers send again). Called with `g`'s slot locked.
    fn send(&self, g: u32, s: &Slot<V>, kind: u8) {
        let gi = g as usize;
        let addr = match (kind, &s.qp) {
            (conn::READY, _) | (_, None) => QpAddr::default(),
            (_, Some(qp)) => self.v.qp_addr(qp),
        };
        let dest = self.p.ud_peers[gi];
        let mut ahs = lock(&self.ahs);
        if ahs[gi].is_none() {
            match self.v.create_ah(&dest, self.p.gid_index) {
                Ok(ah) => ahs[gi] = Some(ah),
                // No route now: the timers try again (and the deadline ends it).
                Err(_) => return,
            }
        }
        let msg = conn::Msg {
            kind,
            src: self.p.me,
            dst: g,
            addr,
        }
        .encode();
        let sge = Sge {
            addr: msg.as_ptr() as u64,
            len: msg.len() as u32,
            lkey: 0,
        };
        let to = UdDest {
            qpn: dest.qpn,
            qkey: QKEY,
        };
        let ah = ahs[gi].as_ref().expect("made above");
        // SAFETY: inline: the bytes are copied during the call.
        let _ = unsafe {
            self.v
                .post_ud_send(&self.ud, ah, to, wrid::make(wrid::UD_SEND, g, 0), sge, true)
        };
    }

    /// The thread: datagrams and timers until `stop`.
    fn serve(&self) {
        let mut wcs = [Wc::EMPTY; 16];
        while !self.stop.load(Ordering::Acquire) {
            let n = match self.v.poll_cq(&self.ud_cq, &mut wcs) {
                Ok(n) => n,
                // Completions were lost; the channel cannot go on (connections not yet
                // made time out and name their peer).
                Err(_) => return,
            };
            for wc in &wcs[..n] {
                self.completion(wc);
            }
            let next = self.run_timers();
            if n == wcs.len() {
                continue;
            }
            let wait = next
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(IDLE_WAKE)
                .min(IDLE_WAKE);
            if self.v.arm_cq(&self.ud_cq).is_err() {
                std::thread::sleep(wait);
                continue;
            }
            // Arming, then looking once more: a completion that came before arming
            // signals nothing.
            match self.v.poll_cq(&self.ud_cq, &mut wcs) {
                Ok(0) => {
                    let _ = self.v.wait_cq(&self.ud_cq, wait);
                }
                Ok(n) => {
                    for wc in &wcs[..n] {
                        self.completion(wc);
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Handles a completion of the UD queue pair.
    fn completion(&self, wc: &Wc) {
        if wrid::kind(wc.wr_id) != wrid::UD_RECV {
            return; // a datagram sent (or lost: the timers send again)
        }
        let i = wrid::index(wc.wr_id) as usize;
        if i >= UD_RECVS {
            return;
        }
        let n = (wc.byte_len as usize).min(UD_BUF);
        let msg = if wc.status == WcStatus::Success && n > GRH_LEN {
            // SAFETY: the receive completed (the NIC wrote it and will not until it is
            // reposted below); inside the UD receive block; only this thread reads it.
            let bytes = unsafe {
                std::slice::from_raw_parts(self.mem.at(i * UD_BUF + GRH_LEN), n - GRH_LEN)
            };
            conn::Msg::decode(bytes)
        } else {
            None
        };
        let sge = Sge {
            addr: self.mem.at(i * UD_BUF) as u64,
            len: UD_BUF as u32,
            lkey: V::lkey(&self.mr),
        };
        // SAFETY: the datagram was decoded into `msg`; the NIC owns the buffer again.
        // (A failed repost loses one of the receives; the others remain.)
        let _ = unsafe {
            self.v
                .post_ud_recv(&self.ud, wrid::make(wrid::UD_RECV, 0, i as u32), sge)
        };
        // Anything malformed, not for us, or from no endpoint of the job is dropped.
        if let Some(m) = msg
            && m.dst == self.p.me
            && (m.src as usize) < self.slots.len()
            && m.src != self.p.me
        {
            self.on_datagram(m);
        }
    }

    /// The connection protocol: one datagram from peer `m.src`.
    fn on_datagram(&self, m: conn::Msg) {
        let g = m.src;
        let mut s = lock(&self.slots[g as usize]);
        if s.failed.is_some() {
            return;
        }
        let same = |s: &Slot<V>| s.remote.is_none_or(|r| r == m.addr);
        match (m.kind, s.state) {
            (conn::CONNECT, State::Idle) => self.accept(g, &mut s, &m.addr),
            // Both sides initiated: the lower global index's CONNECT wins, so the
            // higher one accepts it and the lower one ignores the other.
            (conn::CONNECT, State::Connecting) if self.p.me < g => {}
            (conn::CONNECT, State::Connecting) => self.accept(g, &mut s, &m.addr),
            // Our ACCEPT was lost (or this CONNECT is a duplicate): answer again.
            (conn::CONNECT, State::Accepted | State::Ready) if same(&s) => {
                self.send(g, &s, conn::ACCEPT);
            }
            (conn::ACCEPT, State::Connecting | State::Accepted) => {
                if s.state == State::Connecting
                    && let Err(e) = self.connect_qp(&mut s, &m.addr)
                {
                    self.fail(&mut s, e);
                    return;
                }
                if !same(&s) {
                    return;
                }
                s.state = State::Ready;
                s.timer = None;
                self.send(g, &s, conn::READY);
            }
            // Our READY was lost: the peer sends ACCEPT again.
            (conn::ACCEPT, State::Ready) if same(&s) => self.send(g, &s, conn::READY),
            (conn::READY, State::Accepted) => {
                s.state = State::Ready;
                s.timer = None;
            }
            _ => {}
        }
    }

    /// Answers peer `g`'s CONNECT: our queue pair, connected to theirs, and ACCEPT.
    fn accept(&self, g: u32, s: &mut Slot<V>, remote: &QpAddr) {
        let waited = s.timer.is_some_and(|t| t.waited);
        let r = self.make_qp(g, s).and_then(|_| self.connect_qp(s, remote));
        if let Err(e) = r {
            self.fail(s, e);
            return;
        }
        s.state = State::Accepted;
        self.start_timer(g, s, waited);
        self.send(g, s, conn::ACCEPT);
    }

    /// Retransmits what is due, fails connections past the deadline that someone waits
    /// for, stops the others' timers; the earliest next deadline.
    fn run_timers(&self) -> Option<Instant> {
        let list: Vec<u32> = lock(&self.timers).clone();
        if list.is_empty() {
            return None;
        }
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut done = Vec::new();
        for g in list {
            let mut s = lock(&self.slots[g as usize]);
            let Some(mut t) = s.timer else {
                done.push(g);
                continue;
            };
            if now.duration_since(t.since) >= self.p.timeout {
                s.timer = None;
                done.push(g);
                if t.waited {
                    let a = self.p.addrs[g as usize];
                    let what = match s.state {
                        State::Connecting => "did not answer the connection request",
                        _ => "did not confirm the connection it asked for",
                    };
                    s.failed = Some(format!(
                        "ibv conduit: rank {} endpoint {}: rank {} endpoint {} {what} within {:?} (GEX_IBV_CONNECT_TIMEOUT)",
                        self.p.rank, self.p.index, a.rank, a.ep, self.p.timeout
                    ));
                }
                continue;
            }
            if now >= t.next {
                let kind = match s.state {
                    State::Connecting => conn::CONNECT,
                    _ => conn::ACCEPT,
                };
                self.send(g, &s, kind);
                t.interval = (t.interval * 2).min(RETX_MAX);
                t.next = now + t.interval;
                s.timer = Some(t);
            }
            next = Some(next.map_or(t.next, |n| n.min(t.next)));
        }
        if !done.is_empty() {
            lock(&self.timers).retain(|g| !done.contains(g));
        }
        next
    }
}
