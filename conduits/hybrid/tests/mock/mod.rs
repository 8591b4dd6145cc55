//! Two small conduits for thread ranks of one process, written only to test
//! `Hybrid<Near, Far>` against the contract (neither is smp nor ofi): [`MockNear`]
//! (memory shared by the ranks of one "host": segments and auxiliary areas every
//! near rank addresses directly, a queue and a wake-up flag per endpoint) and
//! [`MockFar`] (a "network": queues between all endpoints, Long payloads carried in
//! the message and copied by the receiver, native puts copied by the "NIC"). Both
//! queue without bound and count what the hybrid conduit asks of them ([`Counts`]).
//! They meet through a [`Fabric`] handed to every rank as the conduit context.
#![allow(unsafe_code, dead_code)]

use gex_core::boot::{BootError, Bootstrap};
use gex_core::spi::{
    Capabilities, Conduit, ConduitEp, ConduitError, Deliver, FarConduit, FarEp, FarPoll, Limits,
    Native, NativeResult, NearConduit, OpenParams, OutMsg, QueuedMsg, ReplyTx, SegRange,
    SharedSegments,
};
use gex_core::{Category, EpAddr, EpIndex, InitError, Injected};
use std::collections::{HashMap, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// One message in a queue: Medium: the payload; Long over the far part: the payload
/// to place.
type Msg = QueuedMsg;

/// `m` sent by `src`, with a Long payload carried in the message if `carry_long`.
fn queued(src: EpAddr, m: &OutMsg<'_>, carry_long: bool) -> Msg {
    let long = m.category() == Category::Long;
    let payload = if !long || carry_long {
        m.payload().to_vec()
    } else {
        Vec::new()
    };
    QueuedMsg::new(src, m, payload, m.payload().len())
}

/// An endpoint's queue and wake-up flag.
#[derive(Debug, Default)]
struct Inbox {
    q: Mutex<VecDeque<Msg>>,
    woken: Mutex<bool>,
    cv: Condvar,
}

impl Inbox {
    fn push(&self, m: Msg) {
        self.q.lock().unwrap().push_back(m);
        self.ring();
    }
    fn ring(&self) {
        *self.woken.lock().unwrap() = true;
        self.cv.notify_all();
    }
    fn pop(&self) -> Option<Msg> {
        self.q.lock().unwrap().pop_front()
    }
    fn has(&self) -> bool {
        !self.q.lock().unwrap().is_empty()
    }
    /// Waits until rung or `timeout` has passed, unless rung already or not empty;
    /// then clears the ring.
    fn wait(&self, timeout: Duration) {
        let mut woken = self.woken.lock().unwrap();
        if !*woken && !self.has() {
            woken = self.cv.wait_timeout(woken, timeout).unwrap().0;
        }
        *woken = false;
    }
}

/// Zero-filled memory at a fixed address, 64-byte aligned.
#[derive(Debug)]
struct Block {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}
// SAFETY: plain memory, accessed through raw pointers by the ranks (threads) of a
// test, like shared memory between processes.
unsafe impl Send for Block {}
// SAFETY: as above.
unsafe impl Sync for Block {}
impl Block {
    fn new(len: usize) -> Block {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).unwrap();
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        Block {
            ptr: NonNull::new(p).expect("memory"),
            layout,
        }
    }
}
impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// What the hybrid conduit asked of the parts of one rank.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) near_sent: AtomicU64,
    pub(crate) far_sent: AtomicU64,
    pub(crate) far_polls: AtomicU64,
    pub(crate) near_blocks: AtomicU64,
    /// Longest `block` timeout the near part was given, in nanoseconds.
    pub(crate) near_block_max_ns: AtomicU64,
    pub(crate) far_blocks: AtomicU64,
    pub(crate) near_finalized: AtomicBool,
    pub(crate) far_finalized: AtomicBool,
    pub(crate) near_opened: AtomicBool,
    pub(crate) far_opened_on_shared: AtomicBool,
}

/// Where the ranks of a test job meet; the conduit context of every rank.
#[derive(Debug, Default)]
pub(crate) struct Fabric {
    near: Mutex<HashMap<(u32, u16), Arc<NearSlot>>>,
    far: Mutex<HashMap<(u32, u16), Arc<FarSlot>>>,
    counts: Mutex<HashMap<u32, Arc<Counts>>>,
}

impl Fabric {
    /// The counts of `rank`.
    pub(crate) fn counts(&self, rank: u32) -> Arc<Counts> {
        self.counts.lock().unwrap().entry(rank).or_default().clone()
    }
}

/// A near endpoint's shared parts.
#[derive(Debug)]
struct NearSlot {
    inbox: Inbox,
    seg: Block,
    seg_len: usize,
    /// The layers' auxiliary area ([`OpenParams::aux_len`] bytes; none when 0).
    aux: Option<Block>,
}

/// A far endpoint's published parts.
#[derive(Debug)]
struct FarSlot {
    inbox: Inbox,
    /// Its segment (an address: the memory belongs to its conduit).
    seg: usize,
    seg_len: usize,
}

fn fabric_of(params: &OpenParams<'_>) -> Result<Arc<Fabric>, InitError> {
    let ctx = params.context.ok_or_else(|| InitError::Conduit {
        conduit: "mock",
        msg: "no fabric context".into(),
    })?;
    let any: &(dyn std::any::Any + Send + Sync) = ctx;
    any.downcast_ref::<Arc<Fabric>>()
        .cloned()
        .ok_or_else(|| InitError::Conduit {
            conduit: "mock",
            msg: "the context is not a mock fabric".into(),
        })
}

/// Delivers one message to `d`, placing a carried Long payload into `seg` first.
fn deliver_one<D: Deliver>(m: Msg, seg: (usize, usize), d: &mut D, tx: &mut dyn ReplyTx) {
    if m.category == Category::Long && !m.payload.is_empty() {
        assert!(m.offset + m.len <= seg.1, "Long outside the segment");
        // SAFETY: in bounds of this endpoint's segment (checked), distinct from `m`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                m.payload.as_ptr(),
                (seg.0 as *mut u8).add(m.offset),
                m.len,
            )
        };
    }
    d.deliver(&m.incoming(&m.payload), tx);
}

// ---------------------------------------------------------------------------------
// The near part

/// The near part: ranks of one host share memory.
#[derive(Debug)]
pub(crate) struct MockNear {
    fabric: Arc<Fabric>,
    ranks: Vec<u32>,
    /// Host of every rank.
    host: Vec<u32>,
    me: u32,
}

/// A near endpoint.
#[derive(Debug)]
pub(crate) struct MockNearEp {
    me: EpAddr,
    slot: Arc<NearSlot>,
    peers: HashMap<(u32, u16), Arc<NearSlot>>,
    conduit: Arc<MockNear>,
    counts: Arc<Counts>,
}

impl MockNear {
    fn same_host(&self, rank: u32) -> bool {
        self.host
            .get(rank as usize)
            .is_some_and(|&h| h == self.host[self.me as usize])
    }
}

// SAFETY: a test conduit that keeps the contract: segments and areas are heap
// blocks of the asked sizes the fabric owns for the job, payloads are delivered from
// the message's own buffer, native puts complete at once (module documentation).
unsafe impl Conduit for MockNear {
    type Ep = MockNearEp;
    const NAME: &'static str = "mock-near";

    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError> {
        Self::open_near(boot, params)
    }

    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), BootError>,
    ) -> Result<(), BootError> {
        let c = self.fabric.counts(self.me);
        assert!(
            c.far_finalized.load(Ordering::SeqCst),
            "the far part's finalisation runs around the near part's"
        );
        c.near_finalized.store(true, Ordering::SeqCst);
        barrier()
    }
}

// SAFETY: a test conduit that keeps the contract: segments and areas are heap
// blocks of the asked sizes the fabric owns for the job, payloads are delivered from
// the message's own buffer, native puts complete at once (module documentation).
unsafe impl NearConduit for MockNear {
    fn open_near(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError> {
        let fabric = fabric_of(params)?;
        let jl = params.layout;
        let me = params.rank;
        let my_eps = jl.eps[me as usize];
        let seg_len = jl.seg_len[me as usize];
        let mine: Vec<Arc<NearSlot>> = (0..my_eps)
            .map(|_| {
                Arc::new(NearSlot {
                    inbox: Inbox::default(),
                    seg: Block::new(seg_len),
                    seg_len,
                    aux: (params.aux_len > 0).then(|| Block::new(params.aux_len)),
                })
            })
            .collect();
        {
            let mut t = fabric.near.lock().unwrap();
            for (e, s) in mine.iter().enumerate() {
                t.insert((me, e as u16), s.clone());
            }
        }
        boot.barrier()?; // collective over every rank, like a real near conduit
        let near = Arc::new(MockNear {
            ranks: jl.neighbours(me),
            host: jl.host.clone(),
            me,
            fabric: fabric.clone(),
        });
        let peers: HashMap<(u32, u16), Arc<NearSlot>> = fabric
            .near
            .lock()
            .unwrap()
            .iter()
            .filter(|((r, _), _)| near.same_host(*r))
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let counts = fabric.counts(me);
        counts.near_opened.store(true, Ordering::SeqCst);
        let eps = mine
            .into_iter()
            .enumerate()
            .map(|(e, slot)| MockNearEp {
                me: EpAddr::new(me, e as u16),
                slot,
                peers: peers.clone(),
                conduit: near.clone(),
                counts: counts.clone(),
            })
            .collect();
        Ok((near, eps))
    }

    fn is_near(&self, rank: u32) -> bool {
        self.ranks.contains(&rank)
    }

    fn near_ranks(&self) -> &[u32] {
        &self.ranks
    }
}

/// Sends `msg` from `me` to a near peer: a Long payload is written in place first.
fn near_send(me: EpAddr, peer: &NearSlot, msg: &OutMsg<'_>) {
    if msg.category() == Category::Long {
        // SAFETY: the core checked the range against the destination's segment.
        unsafe {
            std::ptr::copy_nonoverlapping(
                msg.payload().as_ptr(),
                peer.seg.ptr.as_ptr().add(msg.offset()),
                msg.payload().len(),
            )
        };
    }
    peer.inbox.push(queued(me, msg, false));
}

/// Replies through the near part.
struct NearTx<'a> {
    me: EpAddr,
    peers: &'a HashMap<(u32, u16), Arc<NearSlot>>,
}

/// The slot of endpoint `dst` in `peers`, or a contract error naming the `part`.
fn slot_of<'a, S>(
    peers: &'a HashMap<(u32, u16), Arc<S>>,
    dst: EpAddr,
    part: &str,
) -> Result<&'a S, ConduitError> {
    peers
        .get(&(dst.rank, dst.ep))
        .map(|s| &**s)
        .ok_or_else(|| ConduitError::Contract(format!("no {part} endpoint {dst}")))
}

impl ReplyTx for NearTx<'_> {
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        near_send(self.me, slot_of(self.peers, msg.dst(), "near")?, msg);
        Ok(())
    }
}

/// Replies through the far part: the payload travels in the message.
struct FarTx<'a> {
    me: EpAddr,
    peers: &'a HashMap<(u32, u16), Arc<FarSlot>>,
}

impl ReplyTx for FarTx<'_> {
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        let peer = slot_of(self.peers, msg.dst(), "far")?;
        peer.inbox.push(queued(self.me, msg, true));
        Ok(())
    }
}

impl MockNearEp {
    fn peer(&self, dst: EpAddr) -> &NearSlot {
        assert!(
            self.conduit.is_near(dst.rank),
            "the hybrid conduit addressed far rank {} through the near part",
            dst.rank
        );
        &self.peers[&(dst.rank, dst.ep)]
    }
}

// SAFETY: a test conduit that keeps the contract: segments and areas are heap
// blocks of the asked sizes the fabric owns for the job, payloads are delivered from
// the message's own buffer, native puts complete at once (module documentation).
unsafe impl ConduitEp for MockNearEp {
    fn index(&self) -> EpIndex {
        self.me.ep
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::SHARED_MEMORY | Capabilities::BLOCKING_WAIT
    }
    fn limits(&self, _dst: EpAddr) -> Limits {
        Limits {
            max_args: 16,
            max_medium: 1 << 16,
            max_long: usize::MAX,
        }
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        (self.slot.seg.ptr, self.slot.seg_len)
    }
    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        self.peers
            .get(&(dst.rank, dst.ep))
            .map(|s| (s.seg.ptr, s.seg_len))
    }
    fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        self.peers
            .get(&(dst.rank, dst.ep))
            .and_then(|s| s.aux.as_ref())
            .map(|a| a.ptr)
    }
    fn wake(&self, dst: EpAddr) {
        if let Some(s) = self.peers.get(&(dst.rank, dst.ep)) {
            s.inbox.ring();
        }
    }
    fn inject(&mut self, msg: &OutMsg<'_>, _imm: bool) -> Result<Injected, ConduitError> {
        near_send(self.me, self.peer(msg.dst()), msg);
        self.counts.near_sent.fetch_add(1, Ordering::Relaxed);
        Ok(Injected::Sent)
    }
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(m) = self.slot.inbox.pop() else {
                break;
            };
            let mut tx = NearTx {
                me: self.me,
                peers: &self.peers,
            };
            // Long payloads were written in place by the sender.
            let seg = (self.slot.seg.ptr.as_ptr() as usize, self.slot.seg_len);
            deliver_one(m, seg, d, &mut tx);
            n += 1;
        }
        n
    }
    fn has_incoming(&self) -> bool {
        self.slot.inbox.has()
    }
    fn block(&mut self, timeout: Duration) {
        self.counts.near_blocks.fetch_add(1, Ordering::Relaxed);
        self.counts
            .near_block_max_ns
            .fetch_max(timeout.as_nanos() as u64, Ordering::Relaxed);
        self.slot.inbox.wait(timeout);
    }
}

// ---------------------------------------------------------------------------------
// The far part

/// The far part: a "network" between every endpoint of the job.
#[derive(Debug)]
pub(crate) struct MockFar {
    fabric: Arc<Fabric>,
    me: u32,
    /// Segments this conduit allocated (none on shared segments).
    own: Vec<Block>,
    /// Kept while the conduit lives.
    shared: Option<SharedSegments>,
}

/// A far endpoint.
#[derive(Debug)]
pub(crate) struct MockFarEp {
    me: EpAddr,
    slot: Arc<FarSlot>,
    peers: HashMap<(u32, u16), Arc<FarSlot>>,
    counts: Arc<Counts>,
    conduit: Arc<MockFar>,
}

impl MockFar {
    fn open_on(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
        shared: Option<SharedSegments>,
    ) -> Result<(Arc<Self>, Vec<MockFarEp>), InitError> {
        let fabric = fabric_of(params)?;
        let jl = params.layout;
        let me = params.rank;
        let my_eps = jl.eps[me as usize] as usize;
        let seg_len = jl.seg_len[me as usize];
        let own: Vec<Block> = match &shared {
            Some(_) => Vec::new(),
            None => (0..my_eps).map(|_| Block::new(seg_len)).collect(),
        };
        let segs: Vec<usize> = (0..my_eps)
            .map(|e| match &shared {
                Some(s) => s.segment(e).0.as_ptr() as usize,
                None => own[e].ptr.as_ptr() as usize,
            })
            .collect();
        let mine: Vec<Arc<FarSlot>> = segs
            .iter()
            .map(|&seg| {
                Arc::new(FarSlot {
                    inbox: Inbox::default(),
                    seg,
                    seg_len,
                })
            })
            .collect();
        {
            let mut t = fabric.far.lock().unwrap();
            for (e, s) in mine.iter().enumerate() {
                t.insert((me, e as u16), s.clone());
            }
        }
        boot.barrier()?;
        let counts = fabric.counts(me);
        counts
            .far_opened_on_shared
            .store(shared.is_some(), Ordering::SeqCst);
        let peers: HashMap<(u32, u16), Arc<FarSlot>> = fabric
            .far
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let far = Arc::new(MockFar {
            fabric,
            me,
            own,
            shared,
        });
        let eps = mine
            .into_iter()
            .enumerate()
            .map(|(e, slot)| MockFarEp {
                me: EpAddr::new(me, e as u16),
                slot,
                peers: peers.clone(),
                counts: counts.clone(),
                conduit: far.clone(),
            })
            .collect();
        Ok((far, eps))
    }
}

// SAFETY: a test conduit that keeps the contract: segments and areas are heap
// blocks of the asked sizes the fabric owns for the job, payloads are delivered from
// the message's own buffer, native puts complete at once (module documentation).
unsafe impl Conduit for MockFar {
    type Ep = MockFarEp;
    const NAME: &'static str = "mock";

    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError> {
        Self::open_on(boot, params, None)
    }

    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), BootError>,
    ) -> Result<(), BootError> {
        self.fabric
            .counts(self.me)
            .far_finalized
            .store(true, Ordering::SeqCst);
        barrier()
    }
}

// SAFETY: a test conduit that keeps the contract: segments and areas are heap
// blocks of the asked sizes the fabric owns for the job, payloads are delivered from
// the message's own buffer, native puts complete at once (module documentation).
unsafe impl FarConduit for MockFar {
    fn open_far(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
        segments: SharedSegments,
    ) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError> {
        Self::open_on(boot, params, Some(segments))
    }
}

// SAFETY: a test conduit that keeps the contract: segments and areas are heap
// blocks of the asked sizes the fabric owns for the job, payloads are delivered from
// the message's own buffer, native puts complete at once (module documentation).
unsafe impl ConduitEp for MockFarEp {
    fn index(&self) -> EpIndex {
        self.me.ep
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::NATIVE_RMA | Capabilities::BLOCKING_WAIT
    }
    fn limits(&self, _dst: EpAddr) -> Limits {
        Limits {
            max_args: 16,
            max_medium: 4096,
            max_long: 4096,
        }
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        (
            NonNull::new(self.slot.seg as *mut u8).expect("segment"),
            self.slot.seg_len,
        )
    }
    fn peer_segment(&self, _dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        None
    }
    fn inject(&mut self, msg: &OutMsg<'_>, _imm: bool) -> Result<Injected, ConduitError> {
        let peer = &self.peers[&(msg.dst().rank, msg.dst().ep)];
        peer.inbox.push(queued(self.me, msg, true));
        self.counts.far_sent.fetch_add(1, Ordering::Relaxed);
        Ok(Injected::Sent)
    }
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        self.poll_far(d, budget).delivered
    }
    fn has_incoming(&self) -> bool {
        self.slot.inbox.has()
    }
    fn block(&mut self, timeout: Duration) {
        self.counts.far_blocks.fetch_add(1, Ordering::Relaxed);
        self.slot.inbox.wait(timeout);
    }
    /// The "NIC" copies into the target's registered segment at once.
    unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        let peer = &self.peers[&(to.dst.rank, to.dst.ep)];
        assert!(to.end() <= peer.seg_len);
        // SAFETY: the caller checked the range; `src` is valid for `to.len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(src, (peer.seg as *mut u8).add(to.offset), to.len);
        };
        Ok(Native::Done)
    }
}

// SAFETY: a test conduit that keeps the contract: segments and areas are heap
// blocks of the asked sizes the fabric owns for the job, payloads are delivered from
// the message's own buffer, native puts complete at once (module documentation).
unsafe impl FarEp for MockFarEp {
    fn in_flight(&self) -> bool {
        false
    }
    fn wants_progress(&self) -> bool {
        false
    }
    fn poll_far<D: Deliver>(&mut self, d: &mut D, budget: usize) -> FarPoll {
        self.counts.far_polls.fetch_add(1, Ordering::Relaxed);
        let mut n = 0;
        while n < budget {
            let Some(m) = self.slot.inbox.pop() else {
                break;
            };
            let mut tx = FarTx {
                me: self.me,
                peers: &self.peers,
            };
            deliver_one(m, (self.slot.seg, self.slot.seg_len), d, &mut tx);
            n += 1;
        }
        FarPoll {
            delivered: n,
            active: n > 0,
        }
    }
}
