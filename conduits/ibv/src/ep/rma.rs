//! Native RMA and atomics: operation slots, bounce buffers and the registration
//! cache of direct transfers, puts, gets and atomics, and their completions.

use super::*;

impl<V: Verbs> Ep<V> {
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
    /// the operation in `slot` (deregistered at its completion); `None` if that fails,
    /// with `slot` released (the caller answers `Unsupported`: its AM path).
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
        let Ok(mr) = (unsafe { self.res.v.reg_mr(ptr, len, access) }) else {
            self.release_slot(slot);
            return None;
        };
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

    pub(super) fn rma_done(&mut self, slot: usize, status: WcStatus) {
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

    /// The start of a native operation of one work request to `dst`: the peer's slot
    /// number, its published segment and a free operation slot, once `fits` (given
    /// the peer's segment) allows the access. `Ok(Err(n))`: what the caller answers
    /// (`Unsupported`: not native here, the caller's AM path; `WouldBlock`: no slot
    /// free, or the connection not ready yet).
    ///
    /// # Errors
    /// [`ConduitError::PeerGone`] if the peer endpoint failed.
    #[inline]
    fn rma_begin(
        &mut self,
        dst: EpAddr,
        fits: impl FnOnce(&PeerInfo) -> bool,
    ) -> Result<Result<(u32, PeerInfo, u32), Native>, ConduitError> {
        let Some(g) = self.g(dst) else {
            return Ok(Err(Native::Unsupported));
        };
        let p = self.peers[g as usize].info;
        if !fits(&p) {
            return Ok(Err(Native::Unsupported));
        }
        if let Some(why) = &self.peers[g as usize].failed {
            return Err(ConduitError::PeerGone {
                rank: dst.rank,
                detail: why.clone(),
            });
        }
        let Some(slot) = self.rma_slot(g, 1)? else {
            return Ok(Err(Native::WouldBlock));
        };
        Ok(Ok((g, p, slot)))
    }

    /// [`rma_begin`](Self::rma_begin) of a put or get of the range `at`: native when the
    /// endpoint does native RMA, the transfer is at most [`MAX_TRANSFER`] long and the
    /// range lies in the peer's segment.
    ///
    /// # Errors
    /// As `rma_begin`.
    #[inline]
    fn rma_begin_range(
        &mut self,
        at: SegRange,
    ) -> Result<Result<(u32, PeerInfo, u32), Native>, ConduitError> {
        let SegRange { dst, offset, len } = at;
        let native = self.shape.native_rma && len <= MAX_TRANSFER;
        self.rma_begin(dst, |p| {
            native && offset.checked_add(len).is_some_and(|e| e <= p.seg_len)
        })
    }

    /// Posts the one work request of a native operation on `slot` and starts it:
    /// its ticket, or `Ok(Err(WouldBlock))` if the send queue is full (the slot is
    /// released in both failures).
    ///
    /// # Errors
    /// [`ConduitError::Network`] naming `what` if the provider refused the request.
    #[inline]
    fn rma_post_one(
        &mut self,
        g: u32,
        slot: u32,
        op: SendOp,
        sge: Sge,
        dst: EpAddr,
        what: &str,
    ) -> Result<Result<u64, Native>, ConduitError> {
        match self.rma_post(g, slot, op, sge) {
            Ok(()) => Ok(Ok(self.start(slot, 1))),
            Err(VerbsError::QueueFull) => {
                self.release_slot(slot);
                Ok(Err(Native::WouldBlock))
            }
            Err(e) => {
                self.release_slot(slot);
                Err(verr(dst, what, e))
            }
        }
    }

    /// A put of at most one chunk, or `None` for the caller's AM path.
    ///
    /// # Safety
    /// `src..src+to.len` valid for reads during the call.
    #[inline]
    pub(crate) unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract.
        unsafe { self.native_rw(to, src.cast_mut(), true) }
    }

    /// A get of at most one chunk.
    ///
    /// # Safety
    /// `out..out+from.len` valid for writes and unaccessed until completion.
    #[inline]
    pub(crate) unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
        // SAFETY: forwarded contract.
        unsafe { self.native_rw(from, out, false) }
    }

    /// One RDMA WRITE (`write`: from `buf` to the range `at`) or READ (from `at` into
    /// `buf`) of at most one chunk, through the slot's bounce buffer up to
    /// [`RMA_CHUNK`] bytes (a put's bytes copied in now, a get's copied out at its
    /// completion), else through a registration of `buf`.
    ///
    /// # Safety
    /// A put: `buf..buf+at.len` valid for reads during the call (bounce) or until
    /// completion (direct), and unmodified meanwhile. A get: valid for writes and
    /// unaccessed until completion.
    #[inline]
    unsafe fn native_rw(&mut self, at: SegRange, buf: *mut u8, write: bool) -> NativeResult {
        let SegRange { dst, offset, len } = at;
        let (g, p, slot) = match self.rma_begin_range(at)? {
            Ok(v) => v,
            Err(n) => return Ok(n),
        };
        let bounced = len <= RMA_CHUNK;
        let sge = if bounced {
            if write {
                // SAFETY: the caller's buffer is readable (contract); the slot's bounce
                // buffer is free and RMA_CHUNK long.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        buf,
                        self.res.rma.at(slot as usize * RMA_CHUNK),
                        len,
                    )
                };
            }
            self.bounce(slot, len)
        } else {
            let access = if write {
                Access::empty()
            } else {
                Access::LOCAL_WRITE
            };
            // SAFETY: the caller keeps `buf` valid (and unmodified, or unaccessed) until
            // completion.
            match unsafe { self.direct(slot, buf, len, access) } {
                Some(sge) => sge,
                None => return Ok(Native::Unsupported),
            }
        };
        let (remote_addr, rkey) = (p.seg_addr + offset as u64, p.seg_rkey);
        let (op, what) = if write {
            (SendOp::Write { remote_addr, rkey }, "RDMA WRITE")
        } else {
            (SendOp::Read { remote_addr, rkey }, "RDMA READ")
        };
        let t = match self.rma_post_one(g, slot, op, sge, dst, what)? {
            Ok(t) => t,
            Err(n) => return Ok(n),
        };
        if write {
            self.stats.puts.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.gets.fetch_add(1, Ordering::Relaxed);
            if bounced {
                let o = &mut self.rma_ops[slot as usize];
                o.out = buf as usize;
                o.len = len;
            }
        }
        Ok(Native::Pending(t))
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
        op: &NativeAtomic,
        result: *mut u64,
    ) -> NativeResult {
        let (dst, offset) = (op.dst, op.offset);
        if !self.native_atomic_supported(op.kind, op.base, op.fetch) {
            return Ok(Native::Unsupported);
        }
        let (g, p, slot) = match self.rma_begin(dst, |p| {
            offset % 8 == 0 && offset.checked_add(8).is_some_and(|e| e <= p.seg_len)
        })? {
            Ok(v) => v,
            Err(n) => return Ok(n),
        };
        let (remote_addr, rkey) = (p.seg_addr + offset as u64, p.seg_rkey);
        // Every operation but `Cswap` is a fetch-and-add (of 0 for `Get`).
        let add = match op.base {
            AtomicBase::Cswap => None,
            AtomicBase::Add => Some(op.a),
            AtomicBase::Sub => Some(op.a.wrapping_neg()),
            AtomicBase::Inc => Some(1),
            AtomicBase::Dec => Some(u64::MAX),
            AtomicBase::Get => Some(0),
            _ => {
                self.release_slot(slot);
                return Ok(Native::Unsupported);
            }
        };
        let vop = match add {
            Some(add) => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            },
            None => SendOp::CmpSwap {
                remote_addr,
                rkey,
                compare: op.a,
                swap: op.b,
            },
        };
        let sge = self.bounce(slot, 8);
        let t = match self.rma_post_one(g, slot, vop, sge, dst, "atomic")? {
            Ok(t) => t,
            Err(n) => return Ok(n),
        };
        self.stats.atomics.fetch_add(1, Ordering::Relaxed);
        let o = &mut self.rma_ops[slot as usize];
        o.atomic = Some(*op);
        o.result = if op.fetch { result as usize } else { 0 };
        Ok(Native::Pending(t))
    }

    pub(crate) fn native_test(&mut self, ticket: u64) -> bool {
        if let Some(i) = self.done_tickets.iter().position(|&t| t == ticket) {
            self.done_tickets.swap_remove(i);
            return true;
        }
        false
    }
}
