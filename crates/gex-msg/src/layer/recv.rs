//! The receiving side: arrivals in their sources' order, matching, single-copy
//! reads and the answers they queue.

use super::*;

impl Msg {
    /// A chunk (`DATA`) at byte `off` of receive `rreq`, from `src`.
    pub(super) fn on_data(&mut self, src: EpAddr, rreq: u32, off: u64, chunk: &[u8]) {
        let Some(r) = self.recvs.get_mut(rreq) else {
            self.stats.dropped += 1;
            return;
        };
        let fits = usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(chunk.len()).map(|e| (o, e)))
            .filter(|&(_, e)| e <= r.buf.len());
        let Some((o, e)) = fits.filter(|_| r.env.src == src.rank) else {
            self.stats.dropped += 1;
            return;
        };
        r.buf[o..e].copy_from_slice(chunk);
        r.got += chunk.len();
        if r.got >= r.buf.len()
            && let Some(r) = self.recvs.remove(rreq)
        {
            complete_recv(r.buf, r.env, r.done);
        }
    }

    /// Feeds the held messages of `src` that are next in its order to the engine.
    pub(crate) fn release_held(&mut self, src: u32) {
        while let Some((env, a)) = self.reorder.pop_ready(src) {
            let r = a.as_arrival_ref();
            self.arrive_in_order(env, r);
        }
    }

    /// An arrival numbered `seq` by its source, in any order.
    pub(crate) fn arrive(&mut self, seq: u32, env: Envelope, a: ArrivalRef<'_>) {
        if !self.reorder.is_next(env.src, seq) {
            self.stats.reordered += 1;
            if self
                .reorder
                .hold(env.src, seq, (env, a.to_owned()))
                .is_err()
            {
                self.stats.dropped += 1;
            }
            return;
        }
        self.reorder.advance(env.src);
        self.arrive_in_order(env, a);
        self.release_held(env.src);
    }

    pub(super) fn arrive_in_order(&mut self, env: Envelope, a: ArrivalRef<'_>) {
        // A waiting blocking receive takes an eager message no posted receive wants
        // straight into its slice (no unexpected copy, no allocation). Out of line:
        // only a blocking receive's wait arms it.
        if self.landing.is_some() && self.try_land(env, &a) {
            return;
        }
        match self.matcher.arrive_with(env, || a.to_owned()) {
            Some(recv) => {
                self.stats.matched_posted += 1;
                self.deliver(env, a, recv);
            }
            None => self.stats.unexpected += 1,
        }
    }

    /// The landing's part of [`arrive_in_order`](Self::arrive_in_order): true if the
    /// armed landing took the message.
    #[cold]
    #[inline(never)]
    fn try_land(&mut self, env: Envelope, a: &ArrivalRef<'_>) -> bool {
        let (Some(l), ArrivalRef::Eager { data, flags, sreq }) = (&mut self.landing, a) else {
            return false;
        };
        if !l.takes(&env, data.len()) || self.matcher.has_posted_for(&env) {
            return false;
        }
        l.land(env, data);
        self.stats.landed += 1;
        let (flags, sreq) = (*flags, *sreq);
        self.ack_if_sync(env, flags, sreq);
        true
    }

    /// A matched pair: an arrival and a posted receive.
    pub(super) fn deliver(&mut self, env: Envelope, a: ArrivalRef<'_>, recv: PostedRecv) {
        let PostedRecv { mut buf, cap, done } = recv;
        let dst = self.peer(env.src);
        let truncated = |len: usize, capacity: usize| MsgError::Truncated {
            len,
            capacity,
            source_rank: env.src,
            tag: env.tag,
        };
        match a {
            ArrivalRef::Eager { data, flags, sreq } => {
                if flags & F_SYNC != 0 {
                    self.queue_short(dst, h::ACK, &[sreq]);
                }
                if data.len() > cap {
                    done.fail(truncated(data.len(), cap));
                    return;
                }
                // Room for the status too (`complete_recv`): one allocation at most.
                buf.clear();
                buf.reserve_exact(data.len() + 8);
                buf.extend_from_slice(data);
                complete_recv(buf, env, done);
            }
            ArrivalRef::Rts {
                len,
                sreq,
                flags,
                key,
            } => {
                if len > cap {
                    self.queue_short(dst, h::CTS, &[sreq, 0, 0]);
                    done.fail(truncated(len, cap));
                    return;
                }
                buf.clear();
                buf.reserve_exact(len + 8);
                match self.single_copy_source(env.src, len, flags, key) {
                    Some(Source::Lent(data)) => {
                        data.read(|b| buf.extend_from_slice(b));
                        self.read_done(dst, sreq);
                        complete_recv(buf, env, done);
                        return;
                    }
                    Some(Source::Cma { pid, addr }) => {
                        if gex_sync::cma::cma_read_append(pid, addr, len, &mut buf).is_ok() {
                            self.read_done(dst, sreq);
                            complete_recv(buf, env, done);
                            return;
                        }
                        buf.resize(len, 0);
                        self.note_fallback();
                    }
                    Some(Source::Coop {
                        pid,
                        addr,
                        generation,
                    }) => {
                        buf.resize(len, 0);
                        match self.coop_read(env.src, pid, addr, generation, &mut buf) {
                            crate::coop::Received::Read => {
                                self.read_done(dst, sreq);
                                complete_recv(buf, env, done);
                                return;
                            }
                            // Came late: the sender has a copy; ask where it is.
                            crate::coop::Received::NotLent => {
                                self.clear_to_send(dst, sreq, (buf, env, done), 2);
                                return;
                            }
                            crate::coop::Received::Failed => {}
                        }
                    }
                    None => buf.resize(len, 0),
                }
                self.clear_to_send(dst, sreq, (buf, env, done), 1);
            }
        }
    }

    /// Where the receiver may read a matched rendezvous message of `len` bytes from
    /// `src` (with the RTS's `flags` and `key`) itself; `None`: ask for the chunks.
    /// Counts the offers it refuses as fallbacks.
    pub(crate) fn single_copy_source(
        &mut self,
        src: u32,
        len: usize,
        flags: u32,
        key: u64,
    ) -> Option<Source> {
        if flags & (F_SHARED | F_CMA) == 0 {
            return None;
        }
        let place = self.place.get(src as usize).copied().unwrap_or(Place::Far);
        let got = match place {
            Place::Process if flags & F_SHARED != 0 => {
                let t = direct::take(key, src, self.me.rank, self.me.ep, len);
                if t.as_ref().is_some_and(direct::Taken::in_place) {
                    self.stats.rndv_in_place += 1;
                }
                t.map(Source::Lent)
            }
            Place::Host(pid) if flags & F_CMA != 0 && flags & F_LOAN != 0 && self.cma => {
                let generation = u64::from(flags >> 8) | ((key >> LOAN_ADDR_BITS) << 24);
                let addr = (key & ((1 << LOAN_ADDR_BITS) - 1)) as usize;
                Some(Source::Coop {
                    pid,
                    addr,
                    generation,
                })
            }
            Place::Host(pid) if flags & F_CMA != 0 && self.cma => usize::try_from(key)
                .ok()
                .map(|addr| Source::Cma { pid, addr }),
            _ => None,
        };
        if got.is_none() {
            self.stats.rndv_fallback += 1;
        }
        got
    }

    /// The receiver's side of the cooperative copy (module `coop`) of loan
    /// `generation` of `src` (process `pid`, its slice at `addr`) into `out` (exactly
    /// the message's length). True if every byte arrived; false: ask for the chunks
    /// (counted as a fallback; `out`'s content is then unspecified), or ask where the
    /// sender's copy is (`NotLent`: the loan was withdrawn before this receiver came).
    pub(crate) fn coop_read(
        &mut self,
        src: u32,
        pid: u64,
        addr: usize,
        generation: u64,
        out: &mut [u8],
    ) -> crate::coop::Received {
        let got = match self.loans.get(src as usize).and_then(Option::as_ref) {
            Some(area) => {
                let dst_addr = out.as_ptr() as usize as u64;
                crate::coop::receive(
                    area.loan(),
                    generation,
                    out,
                    dst_addr,
                    |r, o| gex_sync::cma::cma_read(pid, addr.wrapping_add(r.start), o).is_ok(),
                    || crate::coop::process_alive(pid),
                )
            }
            None => crate::coop::Received::NotLent,
        };
        match got {
            crate::coop::Received::Read => self.stats.rndv_in_place += 1,
            crate::coop::Received::Failed => self.note_fallback(),
            crate::coop::Received::NotLent => {}
        }
        got
    }

    /// `ADDR` from `src`: the copy of a withdrawn cooperative loan for receive `rreq`
    /// (send `sreq` of `src`) is at `addr` in `src`'s process: reads it with CMA and
    /// completes the receive (then `DONE`), or asks for the chunks if the read fails.
    pub(super) fn read_moved(&mut self, src: EpAddr, rreq: u32, sreq: u32, addr: u64) {
        let pid = match self.place.get(src.rank as usize) {
            Some(Place::Host(pid)) => *pid,
            _ => {
                self.stats.dropped += 1;
                return;
            }
        };
        let Some(r) = self
            .recvs
            .get_mut(rreq)
            .filter(|r| r.env.src == src.rank && r.got == 0)
        else {
            self.stats.dropped += 1;
            return;
        };
        let read = usize::try_from(addr)
            .ok()
            .is_some_and(|a| gex_sync::cma::cma_read(pid, a, &mut r.buf).is_ok());
        if read {
            if let Some(r) = self.recvs.remove(rreq) {
                self.read_done(src, sreq);
                complete_recv(r.buf, r.env, r.done);
            }
        } else {
            self.note_fallback();
            self.queue_short(src, h::CTS, &[sreq, rreq, 1]);
        }
    }

    /// A single-copy offer accepted but whose read failed: the chunks come instead.
    pub(crate) fn note_fallback(&mut self) {
        self.stats.rndv_fallback += 1;
    }

    /// A single-copy read of send `sreq` of `dst` is complete: tell the sender.
    /// Answers rendezvous send `sreq` of `dst` with a `CTS` (`accepted` = `accepted`)
    /// for a receive into `buf` of message `env`, which `done` completes.
    fn clear_to_send(
        &mut self,
        dst: EpAddr,
        sreq: u32,
        (buf, env, done): (Vec<u8>, Envelope, OpCompleter),
        accepted: u32,
    ) {
        let rreq = self.recvs.insert(RecvOp {
            buf,
            got: 0,
            env,
            done,
        });
        self.queue_short(dst, h::CTS, &[sreq, rreq, accepted]);
    }

    pub(crate) fn read_done(&mut self, dst: EpAddr, sreq: u32) {
        self.stats.rndv_single_copy += 1;
        self.queue_short(dst, h::DONE, &[sreq]);
    }

    /// The endpoint address of the peer `rank` (same endpoint index as this one).
    #[inline]
    pub(crate) fn peer(&self, rank: u32) -> EpAddr {
        EpAddr {
            rank,
            ep: self.me.ep,
        }
    }

    /// Refuses a matched rendezvous message (truncated at the receiver): the sender
    /// drops its bytes.
    pub(crate) fn refuse_rts(&mut self, src: u32, sreq: u32) {
        let dst = self.peer(src);
        self.queue_short(dst, h::CTS, &[sreq, 0, 0]);
    }

    /// Delivers a matched unexpected message (taken from the engine) to `recv`.
    pub(crate) fn deliver_owned(&mut self, env: Envelope, a: Arrival, recv: PostedRecv) {
        let r = a.as_arrival_ref();
        self.deliver(env, r, recv);
    }

    /// Delivers a message matched by a receive being posted (`irecv`): an eager one
    /// now (a copy of at most the eager limit), a rendezvous one at the endpoint's
    /// next progress (its read, or its clear to send, is queued).
    ///
    /// Why: a single-copy read takes as long as a copy of the whole message (a
    /// 64 KiB `process_vm_readv` about 6 µs). Done inside `irecv`, it holds back
    /// whatever the program does next, typically its own `isend`, and the peer,
    /// waiting for that send, idles: two ranks exchanging rendezvous messages with
    /// `irecv`, `isend`, `wait` took turns reading instead of reading at once
    /// (`gex-perf msg`, `msg_bi_lat` 64 KiB: 17.6 µs before, see docs/msg.md).
    /// Matching is not deferred, so the order in which messages match receives is
    /// unchanged; only the receive's completion comes later (MPI allows any order
    /// of completion).
    pub(crate) fn deliver_posted(&mut self, env: Envelope, a: Arrival, recv: PostedRecv) {
        if matches!(a, Arrival::Rts { .. }) {
            self.deferred.push_back((env, a, recv));
        } else {
            self.deliver_owned(env, a, recv);
        }
    }

    /// Delivers the rendezvous messages [`Msg::deliver_posted`] deferred.
    pub(crate) fn run_deferred(&mut self) {
        while let Some((env, a, recv)) = self.deferred.pop_front() {
            self.deliver_owned(env, a, recv);
        }
    }

    /// The synchronous-send acknowledgement of an eager message taken by a receive
    /// that copied it itself (the blocking receive's fast path).
    pub(crate) fn ack_if_sync(&mut self, env: Envelope, flags: u32, sreq: u32) {
        if flags & F_SYNC != 0 {
            let dst = self.peer(env.src);
            self.queue_short(dst, h::ACK, &[sreq]);
        }
    }
}
