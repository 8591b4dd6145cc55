//! The simulated network: messages, inboxes and their ordering (FIFO lanes or a
//! seeded reordering heap), the job's endpoint table, and the send and take of one
//! message.

use super::*;

impl Msg {
    fn order(&self) -> (u64, u64, u64, u64) {
        (self.due_poll, self.due_ns, self.key, self.seq)
    }
    pub(super) fn eligible(&self, clock: u64, now_ns: u64) -> bool {
        self.due_poll <= clock && self.due_ns <= now_ns
    }
}

impl PartialEq for Keyed {
    fn eq(&self, o: &Self) -> bool {
        self.0.order() == o.0.order()
    }
}

impl Eq for Keyed {}

impl PartialOrd for Keyed {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}

impl Ord for Keyed {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        self.0.order().cmp(&o.0.order())
    }
}

impl EpSlot {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Net {
    pub(super) fn new(layout: &JobLayout, cfg: &SimConfig, aux_len: usize) -> Net {
        let mut first_gid = Vec::with_capacity(layout.eps.len());
        let mut total = 0usize;
        for &e in &layout.eps {
            first_gid.push(total);
            total += e as usize;
        }
        let mut slots = Vec::with_capacity(total);
        for (r, &e) in layout.eps.iter().enumerate() {
            for _ in 0..e {
                let bell = Doorbell::new();
                bell.set_may_block(cfg.blocking_wait);
                slots.push(EpSlot {
                    inbox: Mutex::new(Inbox {
                        clock: 0,
                        lanes: if cfg.reorder {
                            Vec::new()
                        } else {
                            (0..2 * total).map(|_| VecDeque::new()).collect()
                        },
                        rr: 0,
                        heap: BinaryHeap::new(),
                        req_bytes: vec![0; total],
                        seq: 0,
                    }),
                    queued: AtomicUsize::new(0),
                    arrivals: AtomicU64::new(0),
                    delivered: AtomicU64::new(0),
                    bell,
                    seg: SegMem::new(layout.seg_len[r]),
                    aux: SegMem::new(aux_len),
                    wakes: AtomicU64::new(0),
                    completed: Mutex::new(HashMap::new()),
                    requests: AtomicU64::new(0),
                });
            }
        }
        Net {
            layout: layout.clone(),
            first_gid,
            slots,
            aux_len,
            opened: (0..layout.eps.len())
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }

    pub(super) fn gid(&self, a: EpAddr) -> Option<usize> {
        let r = a.rank as usize;
        if r < self.layout.eps.len() && a.ep < self.layout.eps[r] {
            Some(self.first_gid[r] + a.ep as usize)
        } else {
            None
        }
    }

    pub(super) fn addr(&self, gid: usize) -> EpAddr {
        let r = self.first_gid.partition_point(|&f| f <= gid) - 1;
        EpAddr::new(r as u32, (gid - self.first_gid[r]) as u16)
    }
}

/// Queues `msg` from `src` to `dst`. Requests respect the lane capacity.
#[allow(clippy::too_many_arguments)]
pub(super) fn push(
    fab: &FabricInner,
    src: EpAddr,
    src_gid: usize,
    rng: &mut SplitMix64,
    msg: &OutMsg<'_>,
    capacity: bool,
    mut owned: Option<Owned<'_>>,
) -> Result<Injected, ConduitError> {
    let dst = msg.dst();
    fab.check_alive();
    let cfg = &fab.cfg;
    let net = fab.net();
    let dgid = net
        .gid(dst)
        .ok_or_else(|| conduit_err(format!("core passed a bad destination {dst}")))?;
    let lim = limits_for(cfg, net, src.rank, dst);
    if msg.args().len() > lim.max_args {
        return Err(conduit_err(format!(
            "core passed {} args (max {})",
            msg.args().len(),
            lim.max_args
        )));
    }
    let slot = &net.slots[dgid];
    let payload: &[u8] = match &owned {
        Some(o) => o.buf.as_deref().unwrap_or_default(),
        None => msg.payload(),
    };
    match msg.category() {
        Category::Short if !payload.is_empty() => {
            return Err(conduit_err("core passed a Short AM with a payload".into()));
        }
        Category::Medium if payload.len() > lim.max_medium => {
            return Err(conduit_err(format!(
                "core passed a {}-byte Medium payload to {dst}, over this peer's limit of {}",
                payload.len(),
                lim.max_medium
            )));
        }
        Category::Long
            if payload.len() > lim.max_long
                || msg
                    .offset()
                    .checked_add(payload.len())
                    .is_none_or(|e| e > slot.seg.len()) =>
        {
            return Err(conduit_err(format!(
                "core passed an out-of-range Long ({} bytes at {} to {dst})",
                payload.len(),
                msg.offset()
            )));
        }
        _ => {}
    }
    let request = msg.kind() == Kind::Request;
    let cost = if request {
        MSG_OVERHEAD + 4 * msg.args().len() + payload.len()
    } else {
        0
    };
    let now_ns = fab.now_ns();
    let mut ib = slot.lock();
    if capacity && request {
        let used = ib.req_bytes[src_gid];
        if used > 0 && used + cost > cfg.ring_capacity {
            return Ok(Injected::WouldBlock);
        }
    }
    let mut copies = 1;
    if request {
        let nth = net.slots[src_gid].requests.fetch_add(1, Ordering::Relaxed) + 1;
        match cfg.fault {
            Fault::DropRequest(n) if n == nth => return Ok(Injected::Sent),
            Fault::DuplicateRequest(n) if n == nth => copies = 2,
            _ => {}
        }
    }
    if msg.category() == Category::Long {
        let shift = cfg.fault == Fault::ShiftLong
            && !payload.is_empty()
            && msg.offset() + 1 + payload.len() <= slot.seg.len();
        slot.seg.write(msg.offset() + usize::from(shift), payload);
    }
    let len = payload.len();
    let take =
        msg.category() == Category::Medium && owned.as_ref().is_some_and(|o| o.ticket.is_some());
    let (mut body, ticket) = match msg.category() {
        Category::Medium if !take => (payload.to_vec(), None),
        Category::Medium => match owned.as_mut() {
            Some(o) => (o.buf.take().unwrap_or_default(), o.ticket),
            None => (Vec::new(), None),
        },
        _ => (Vec::new(), None),
    };
    // Draw only for messages that are sent: a sender's schedule depends on its stream.
    for copy in 0..copies {
        let jp = rng.up_to(cfg.jitter.polls);
        let jn = rng.up_to(cfg.jitter.nanos);
        let key = rng.next_u64();
        let seq = ib.seq;
        ib.seq += 1;
        let payload = if copy + 1 == copies {
            std::mem::take(&mut body)
        } else {
            body.clone()
        };
        let m = Msg {
            q: QueuedMsg::new(src, msg, payload, len),
            src_gid,
            due_poll: ib
                .clock
                .saturating_add(cfg.latency.polls)
                .saturating_add(jp),
            due_ns: if fab.timed {
                now_ns.saturating_add(cfg.latency.nanos).saturating_add(jn)
            } else {
                0
            },
            key,
            seq,
            cost: if copy == 0 { cost } else { 0 },
            ticket: if copy + 1 == copies { ticket } else { None },
        };
        ib.req_bytes[src_gid] += m.cost;
        if cfg.reorder {
            ib.heap.push(Reverse(Keyed(m)));
        } else {
            let lane = 2 * src_gid + usize::from(msg.kind() == Kind::Reply);
            ib.lanes[lane].push_back(m);
        }
    }
    slot.queued.fetch_add(copies, Ordering::Release);
    slot.arrivals.fetch_add(copies as u64, Ordering::Release);
    drop(ib);
    slot.bell.ring();
    Ok(Injected::Sent)
}

/// Takes the next deliverable message (FIFO mode: round-robin over lanes, front only),
/// releasing its lane bytes.
pub(super) fn pop_one(ib: &mut Inbox, reorder: bool, clock: u64, now_ns: u64) -> Option<Msg> {
    let m = if reorder {
        match ib.heap.peek() {
            Some(Reverse(Keyed(m))) if m.eligible(clock, now_ns) => {
                ib.heap.pop().map(|Reverse(Keyed(m))| m)
            }
            _ => None,
        }
    } else {
        let lanes = ib.lanes.len();
        let start = ib.rr;
        let lane = (0..lanes).map(|k| (start + k) % lanes).find(|&l| {
            ib.lanes[l]
                .front()
                .is_some_and(|m| m.eligible(clock, now_ns))
        })?;
        ib.rr = (lane + 1) % lanes;
        ib.lanes[lane].pop_front()
    }?;
    ib.req_bytes[m.src_gid] -= m.cost;
    Some(m)
}

impl ReplyTx for Replier<'_> {
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        push(self.fab, self.me, self.gid, self.rng, msg, false, None).map(|_| ())
    }
}
