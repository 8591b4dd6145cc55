//! The active-message path: credits, sends (inline, bounce slots, deferred
//! replies), completions and delivery, blocking, and the lazy wire-up of queue
//! pairs.

use super::*;

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
    pub(super) fn g(&self, dst: EpAddr) -> Option<u32> {
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
    pub(super) unsafe fn post(&self, gi: usize, wr: &SendWr) -> Result<(), VerbsError> {
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
}

impl<V: Verbs> Ep<V> {
    // ---- lazy wire-up (slow path) ----------------------------------------------------

    /// Peer `g` is not ready: asks the connection channel (which starts the connection
    /// if there is none) and adopts the queue pair once it is ready. `Ok(true)` when it
    /// is ready now.
    #[cold]
    pub(super) fn connect(&mut self, g: u32) -> Result<bool, ConduitError> {
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
