//! The sending side: the outbox, starting eager, rendezvous, cooperative and lent
//! sends, and the pump that streams the chunks of cleared ones.

use super::*;

impl Msg {
    /// A clear to send (`CTS`) from `src` for send `sreq`, answered by receive `rreq`:
    /// `ok` 1 streams the chunks, 2 asks where a withdrawn loan's copy is, 0 drops the
    /// send (the receiver took the message as truncated).
    pub(super) fn on_cts(&mut self, src: EpAddr, sreq: u32, rreq: u32, ok: u32) {
        match self.sends.get_mut(sreq) {
            Some(SendOp::Rndv {
                dst,
                rreq: r @ None,
                done,
                ..
            }) if *dst == src => {
                // Matched: a synchronous send is complete.
                if let Some(d) = done.take() {
                    d.ok();
                }
                if ok == 2 {
                    // A cooperative loan found withdrawn: tell the receiver
                    // where the copy is (kept until its `DONE` or `CTS`).
                    // Still lent (the receiver could not claim it): the send
                    // withdraws it and answers then (`coop_step`).
                    if let Some(SendOp::Rndv {
                        data,
                        by_address,
                        ask_addr,
                        ..
                    }) = self.sends.get_mut(sreq)
                    {
                        match data {
                            Some(d) => {
                                *by_address = true;
                                let a = d.as_ptr() as usize as u64;
                                self.queue_addr(src, rreq, sreq, a);
                            }
                            None => *ask_addr = Some(rreq),
                        }
                    }
                } else if ok == 1 {
                    *r = Some(rreq);
                    self.streaming.push_back(sreq);
                } else {
                    // The receiver consumed the message as truncated: its
                    // bytes are not needed.
                    drop(self.sends.remove(sreq));
                }
            }
            _ => self.stats.dropped += 1,
        }
    }

    /// Queues a request to send: `head` is (context, tag, sequence number, flags, send
    /// id), then the length and the key, each as two words.
    pub(super) fn queue_rts(&mut self, dst: EpAddr, head: [u32; 5], len: u64, key: u64) {
        let [ctx, tag, seq, flags, sreq] = head;
        let args = [
            ctx,
            tag,
            seq,
            flags,
            sreq,
            len as u32,
            (len >> 32) as u32,
            key as u32,
            (key >> 32) as u32,
        ];
        self.queue_short(dst, h::RTS, &args);
    }

    /// Queues `ADDR`: the copy of send `sreq` for receive `rreq` is at `addr`.
    pub(super) fn queue_addr(&mut self, dst: EpAddr, rreq: u32, sreq: u32, addr: u64) {
        self.queue_short(
            dst,
            h::ADDR,
            &[rreq, sreq, addr as u32, (addr >> 32) as u32],
        );
    }

    pub(super) fn queue_short(&mut self, dst: EpAddr, h: u8, a: &[u32]) {
        let mut args = [0u32; 9];
        args[..a.len()].copy_from_slice(a);
        self.outbox.push_back(Out::Short {
            dst,
            h,
            args,
            n: a.len() as u8,
        });
    }

    /// The largest message a standard send to `dst` takes eagerly: `GEX_MSG_EAGER_MAX`;
    /// for a nonblocking one (`nb`) to another process of this host,
    /// `GEX_MSG_NB_EAGER_MAX` if larger. Never above the conduit's Medium limit.
    pub(crate) fn eager_limit<C: Conduit>(&self, cx: &Cx<'_, C>, dst: u32, nb: bool) -> usize {
        let e = match self.place.get(dst as usize) {
            Some(Place::Host(_)) if nb => self.eager_max.max(self.nb_eager_max),
            _ => self.eager_max,
        };
        e.min(cx.max_medium(self.peer(dst)))
    }

    /// The fast path of a standard send: if `data` goes eagerly, nothing is queued
    /// before it and the conduit takes the message now, sends it and returns `true`
    /// (the send is complete). `false`: nothing sent, take [`start_send`](Self::start_send).
    pub(crate) fn try_eager_now<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        nb: bool,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &[u8],
    ) -> Result<bool, MsgError> {
        let to = self.peer(dst);
        if !self.outbox.is_empty() || data.len() > self.eager_limit(cx, dst, nb) {
            return Ok(false);
        }
        let seq = self.send_seq[dst as usize];
        let args = [ctx, tag, seq, 0, 0];
        match cx.try_request(
            to,
            self.hid[h::EAGER as usize],
            Category::Medium,
            &args,
            data,
            0,
        )? {
            Injected::WouldBlock => Ok(false),
            _ => {
                self.send_seq[dst as usize] = seq.wrapping_add(1);
                self.stats.eager_sent += 1;
                Ok(true)
            }
        }
    }

    /// Starts a send of `data` to `dst` (checked by the caller): eager or
    /// rendezvous; `done` completes when the send does (at once for an eager send
    /// injected now). On an error nothing was sent and `done` is dropped.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_send<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &[u8],
        sync: bool,
        done: OpCompleter,
    ) -> Result<(), MsgError> {
        let to = self.peer(dst);
        let seq = self.send_seq[dst as usize];
        let flags = if sync { F_SYNC } else { 0 };
        // Flush what is queued first, so that a send under back-pressure keeps its
        // place behind earlier ones (the receiver restores the order anyway).
        self.pump(cx);
        if data.len() <= self.eager_max.min(cx.max_medium(to)) {
            let (sreq, done) = if sync {
                (self.sends.insert(SendOp::AwaitAck { done }), None)
            } else {
                (0, Some(done))
            };
            let args = [ctx, tag, seq, flags, sreq];
            let injected = if self.outbox.is_empty() {
                cx.try_request(
                    to,
                    self.hid[h::EAGER as usize],
                    Category::Medium,
                    &args,
                    data,
                    0,
                )
            } else {
                Ok(Injected::WouldBlock)
            };
            match injected {
                Ok(Injected::WouldBlock) => {
                    self.outbox.push_back(Out::Eager {
                        dst: to,
                        args,
                        data: data.to_vec(),
                        done,
                    });
                    cx.set_busy();
                }
                Ok(_) => {
                    if let Some(d) = done {
                        d.ok();
                    }
                }
                Err(e) => {
                    if sync {
                        drop(self.sends.remove(sreq));
                    }
                    return Err(e.into());
                }
            }
            self.stats.eager_sent += 1;
        } else {
            let len = data.len() as u64;
            // The layer owns a copy of the bytes: a standard send is complete now.
            let done = if sync {
                Some(done)
            } else {
                done.ok();
                None
            };
            let data: Arc<[u8]> = self.stage.copy_of(data);
            // A single-copy offer (module `direct`): a registry id for a thread rank of
            // this process, the buffer's address for a process of this host.
            let (flags, key, lent) = match self.place[dst as usize] {
                Place::Process => {
                    let t = direct::lend(self.me.rank, dst, self.me.ep, data.clone());
                    (flags | F_SHARED, t.key(), Some(t))
                }
                Place::Host(_) if self.cma => (flags | F_CMA, data.as_ptr() as usize as u64, None),
                _ => (flags, 0, None),
            };
            let by_address = flags & F_CMA != 0;
            let sreq = self.sends.insert(SendOp::Rndv {
                dst: to,
                data: Some(data),
                rreq: None,
                off: 0,
                done,
                _lent: lent,
                by_address,
                coop: false,
                ask_addr: None,
            });
            self.queue_rts(to, [ctx, tag, seq, flags, sreq], len, key);
            self.stats.rndv_sent += 1;
            self.pump(cx);
            cx.set_busy();
        }
        self.send_seq[dst as usize] = seq.wrapping_add(1);
        Ok(())
    }

    /// How long a blocking send of `len` bytes lends the caller's slice to a receiver
    /// that has not taken it (`GEX_MSG_LEND_WAIT`, plus about the time a copy takes).
    pub(crate) fn lend_budget(&self, len: usize) -> std::time::Duration {
        std::time::Duration::from_nanos(self.lend_wait_ns.saturating_add(len as u64 / 8))
    }

    /// How a blocking standard send of `len` bytes to `dst` lends the caller's slice,
    /// if it does: a rendezvous to another thread rank of this process (the registry,
    /// module `direct`), or to another process of this host whose loan blocks both
    /// sides map (the cooperative copy, module `coop`).
    pub(crate) fn lends<C: Conduit>(
        &self,
        cx: &Cx<'_, C>,
        dst: u32,
        data: &[u8],
    ) -> Option<LendTo> {
        if dst == self.me.rank || data.len() <= self.eager_max.min(cx.max_medium(self.peer(dst))) {
            return None;
        }
        match self.place.get(dst as usize)? {
            Place::Process => Some(LendTo::Process),
            Place::Host(pid)
                if self.cma
                    && self.my_loan.is_some()
                    && self.loans.get(dst as usize).is_some_and(Option::is_some)
                    && (data.as_ptr() as usize as u64) >> LOAN_ADDR_BITS == 0 =>
            {
                Some(LendTo::Host(*pid))
            }
            _ => None,
        }
    }

    /// Starts a rendezvous send of the caller's `data` to `dst` (checked by the
    /// caller, [`lends`](Self::lends) gave `LendTo::Host`), lent for the cooperative
    /// copy (module `coop`): the caller keeps lending `data` until
    /// [`coop_step`](Self::coop_step) says the loan ended. Returns the send's id and
    /// the loan's generation.
    pub(crate) fn start_coop_send<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &[u8],
    ) -> (u32, u64) {
        let to = self.peer(dst);
        let seq = self.send_seq[dst as usize];
        self.pump(cx);
        let generation = match &self.my_loan {
            Some(a) => self.lender.offer(a.loan()),
            None => unreachable!("lends() checked the loan block"),
        };
        let sreq = self.sends.insert(SendOp::Rndv {
            dst: to,
            data: None,
            rreq: None,
            off: 0,
            done: None,
            _lent: None,
            by_address: false,
            coop: true,
            ask_addr: None,
        });
        let len = data.len() as u64;
        let key = (data.as_ptr() as usize as u64) | ((generation >> 24) << LOAN_ADDR_BITS);
        self.queue_rts(
            to,
            [
                ctx,
                tag,
                seq,
                F_CMA | F_LOAN | (((generation & 0xff_ffff) as u32) << 8),
                sreq,
            ],
            len,
            key,
        );
        self.stats.rndv_sent += 1;
        self.send_seq[dst as usize] = seq.wrapping_add(1);
        self.pump(cx);
        cx.set_busy();
        (sreq, generation)
    }

    /// A guard that ends loan `generation` of `data` (to process `pid`) if the
    /// cooperative send unwinds before it ended (`None` without a loan block).
    pub(crate) fn coop_guard<'a>(
        &self,
        generation: u64,
        pid: u64,
        data: &'a [u8],
    ) -> Option<CoopGuard<'a>> {
        Some(CoopGuard {
            area: self.my_loan.as_ref()?.dup(),
            generation,
            pid,
            data,
            armed: true,
        })
    }

    /// One step of the sender of cooperative send `sreq` (loan `generation` of
    /// `data`, to process `pid`; module `coop`): helps copy while the receiver
    /// copies; withdraws the loan if its receiver asked for chunks or refused the
    /// message, or if `expired`. When the loan ends, the send gets the bytes it may
    /// still have to stream: a copy of `data` (withdrawn, failed) or nothing (read).
    pub(crate) fn coop_step(
        &mut self,
        sreq: u32,
        generation: u64,
        pid: u64,
        data: &[u8],
        expired: bool,
    ) -> crate::coop::Step {
        use crate::coop::Step;
        let Some(area) = &self.my_loan else {
            return Step::Failed;
        };
        // The receiver asked for chunks (its CTS came) or refused the message (the
        // send is gone): it will not read the slice.
        let withdraw = expired
            || !matches!(
                self.sends.get_mut(sreq),
                Some(SendOp::Rndv {
                    rreq: None,
                    coop: true,
                    ask_addr: None,
                    ..
                })
            );
        let step =
            crate::coop::sender_step(area.loan(), generation, data.len(), withdraw, |r, to| {
                direct::coop_write(pid, to, &data[r])
            });
        let end = match step {
            Step::Ready | Step::Reading => return step,
            Step::Done => self.empty.clone(),
            Step::Withdrawn | Step::Failed => Arc::from(data),
        };
        if let Some(SendOp::Rndv {
            dst,
            data: d @ None,
            coop: true,
            by_address,
            ask_addr,
            ..
        }) = self.sends.get_mut(sreq)
        {
            let a = end.as_ptr() as usize as u64;
            *d = Some(end);
            if let Some(rreq) = ask_addr.take() {
                *by_address = true;
                let dst = *dst;
                self.queue_addr(dst, rreq, sreq, a);
            }
        }
        step
    }

    /// Starts a rendezvous send of the caller's `data` to `dst` (checked by the
    /// caller, [`lends`](Self::lends) true), lent in place: the caller keeps the
    /// returned loan (and so its borrow of `data`) until the receiver is done or the
    /// loan is withdrawn. Returns the send's id and the loan.
    pub(crate) fn start_lent_send<'a, C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &'a [u8],
    ) -> (u32, direct::Loan<'a>) {
        let to = self.peer(dst);
        let seq = self.send_seq[dst as usize];
        self.pump(cx);
        let (loan, ticket) = direct::Loan::new(self.me.rank, dst, self.me.ep, data);
        let key = ticket.key();
        let sreq = self.sends.insert(SendOp::Rndv {
            dst: to,
            data: None,
            rreq: None,
            off: 0,
            done: None,
            _lent: Some(ticket),
            by_address: false,
            coop: false,
            ask_addr: None,
        });
        let len = data.len() as u64;
        self.queue_rts(to, [ctx, tag, seq, F_SHARED, sreq], len, key);
        self.stats.rndv_sent += 1;
        self.send_seq[dst as usize] = seq.wrapping_add(1);
        self.pump(cx);
        cx.set_busy();
        (sreq, loan)
    }

    /// True if the receiver of send `sreq` asked for chunks (its CTS came).
    pub(crate) fn cleared(&self, sreq: u32) -> bool {
        matches!(
            self.sends.items.get(sreq as usize),
            Some(Some(SendOp::Rndv { rreq: Some(_), .. }))
        )
    }

    /// Flushes the outbox and streams cleared rendezvous sends until back-pressure.
    pub(crate) fn pump<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> Progress {
        while let Some(o) = self.outbox.front() {
            let r = match o {
                Out::Short { dst, h, args, n } => cx.try_request(
                    *dst,
                    self.hid[*h as usize],
                    Category::Short,
                    &args[..*n as usize],
                    &[],
                    0,
                ),
                Out::Eager {
                    dst, args, data, ..
                } => cx.try_request(
                    *dst,
                    self.hid[h::EAGER as usize],
                    Category::Medium,
                    args,
                    data,
                    0,
                ),
            };
            match r {
                Ok(Injected::WouldBlock) => return Progress::Spinning,
                // A failed injection (a peer gone) drops the message and fails the
                // send queued with it, if any.
                r => {
                    if let Some(Out::Eager { done: Some(d), .. }) = self.outbox.pop_front() {
                        match r {
                            Ok(_) => d.ok(),
                            Err(e) => d.fail(MsgError::Am(e)),
                        }
                    }
                }
            }
        }
        while let Some(&sreq) = self.streaming.front() {
            let Some(SendOp::Rndv {
                dst,
                data,
                rreq: Some(rreq),
                off,
                _lent: lent,
                ..
            }) = self.sends.get_mut(sreq)
            else {
                self.streaming.pop_front();
                continue;
            };
            if data.is_none() {
                // A lent slice: its sender withdraws it (into an owned copy) when it
                // sees the CTS; until then nothing can be streamed.
                match lent.as_ref().and_then(|t| direct::owned(t.key())) {
                    Some(d) => *data = Some(d),
                    None => return Progress::Spinning,
                }
            }
            let Some(data) = data.as_deref() else {
                return Progress::Spinning;
            };
            let chunk = cx.max_medium(*dst).max(1);
            while *off < data.len() {
                let end = (*off + chunk).min(data.len());
                let o = *off as u64;
                match cx.try_request(
                    *dst,
                    self.hid[h::DATA as usize],
                    Category::Medium,
                    &[*rreq, o as u32, (o >> 32) as u32],
                    &data[*off..end],
                    0,
                ) {
                    Ok(Injected::WouldBlock) => return Progress::Spinning,
                    Ok(_) => *off = end,
                    Err(_) => {
                        // A peer gone: the rest of the message is dropped (the send
                        // completed when it was matched or copied).
                        self.stats.dropped += 1;
                        break;
                    }
                }
            }
            self.streaming.pop_front();
            if let Some(op) = self.sends.remove(sreq) {
                self.end_send(op);
            }
        }
        Progress::Idle
    }

    /// Ends a send taken out of `sends` whose bytes are no longer needed (read by
    /// the receiver, or every chunk injected): completes it if it was waiting, and
    /// keeps its copy for a later send (module `stage`).
    pub(super) fn end_send(&mut self, op: SendOp) {
        if let SendOp::Rndv {
            data, done, _lent, ..
        } = op
        {
            // The registry's entry first, so that the copy is ours alone.
            drop(_lent);
            if let Some(d) = done {
                d.ok();
            }
            if let Some(b) = data {
                self.stage.keep(b);
            }
        }
    }
}
