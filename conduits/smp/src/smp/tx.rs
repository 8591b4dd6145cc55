//! The sending side of an endpoint: encoding a message into a ring record, first
//! contacts, replies and requests kept when a ring is full.

use super::*;

#[inline(always)]
pub(super) fn user_word(msg: &OutMsg<'_>) -> u32 {
    record::user_word(msg.handler(), msg.category(), msg.kind(), msg.args().len())
}

/// Writes one message (args, then Medium payload or Long descriptor) into `body`; for
/// Long, first copies the payload into the destination segment.
///
/// # Safety
/// `body` must be valid for `body_len(msg)` bytes and 8-byte aligned; for Long, `seg`
/// must be the destination's segment and `msg.offset + msg.payload.len() <= seg.len`.
#[inline(always)]
unsafe fn encode(body: *mut u8, msg: &OutMsg<'_>, seg: Seg) {
    let (args, payload) = (msg.args(), msg.payload());
    let area = args_area(args.len());
    // SAFETY: caller guarantees `body` has room for the args area and what follows.
    // Plain copies into `body`: a reserved record of the ring that the consumer reads
    // only after the commit's release (the Long payload below goes to a segment and is
    // atomic).
    unsafe {
        std::ptr::copy_nonoverlapping(args.as_ptr().cast::<u8>(), body, args.len() * 4);
        match msg.category() {
            Category::Short => {}
            Category::Medium => {
                std::ptr::copy_nonoverlapping(payload.as_ptr(), body.add(area), payload.len());
            }
            Category::Long => {
                // The core checked the range against the layout, and `open` checked
                // that the layout is what the destination's region maps.
                debug_assert!(
                    msg.offset()
                        .checked_add(payload.len())
                        .is_some_and(|e| e <= seg.len),
                    "gex smp: a Long past the destination's segment"
                );
                let dst = seg.base.0.as_ptr().add(msg.offset());
                if dst.cast_const() != payload.as_ptr() {
                    // Race-free: byte-wise atomic stores into the destination segment,
                    // which its owner and other ranks access at any time. The source is
                    // a shared borrow, so nothing writes it meanwhile (a source inside
                    // a segment came from `unsafe` `Segment::as_slice`, whose contract
                    // says so), and plain loads of it are right.
                    gex_sync::copy::atomic_write(dst, payload);
                }
                body.add(area).cast::<u64>().write(msg.offset() as u64);
                body.add(area + 8).cast::<u64>().write(payload.len() as u64);
            }
        }
    }
}

/// What a kept request of `len` body bytes counts against `GEX_SMP_OVERFLOW`: at least
/// one byte, so that an overflow of 0 keeps nothing and requests with an empty body
/// (a Short AM without arguments) cannot be kept without bound. (Counted as 0 they
/// were: a flood of them to a busy peer grew the queue for as long as it lasted.)
fn kept_len(len: usize) -> usize {
    len.max(1)
}

#[inline(always)]
fn body_len(msg: &OutMsg<'_>) -> usize {
    let area = args_area(msg.args().len());
    match msg.category() {
        Category::Short => area,
        Category::Medium => area + msg.payload().len(),
        Category::Long => area + 16,
    }
}

/// Publishes `msg` into `prod`; false if the ring is full.
#[inline(always)]
pub(super) fn put(prod: &mut Producer, msg: &OutMsg<'_>, seg: Seg) -> bool {
    let len = body_len(msg);
    let Some(mut r) = prod.reserve(len) else {
        return false;
    };
    // SAFETY: the reservation is `len` bytes, 8-byte aligned; the core checked Long bounds.
    unsafe { encode(r.body_ptr(), msg, seg) };
    r.commit(user_word(msg), len);
    true
}

impl Tx {
    #[inline(always)]
    pub(super) fn g(&self, dst: EpAddr) -> usize {
        let b = self.g_base[dst.rank as usize];
        debug_assert!(b != usize::MAX, "gex smp: {dst} is not on this host");
        b + dst.ep as usize
    }

    /// Makes the producers to slot `g` on first contact: a slot made at run time must
    /// be open (its state word, read with `Acquire`); an endpoint made at run time
    /// announces itself to the slot (its contacts word) so the slot's owner polls it.
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] if the slot is not open.
    #[cold]
    #[inline(never)]
    fn connect(&mut self, g: usize) -> Result<(), ConduitError> {
        use gex_sync::atomic::Ordering;
        let dst = self.dst[g];
        let c = self.conduit.clone();
        let li = c.local_of[dst.rank as usize] as usize;
        let (l, m) = (&c.layouts[li], &c.maps[li]);
        let de = dst.ep as usize;
        if de >= l.eps {
            self.check_open(g)?;
        }
        for reply in [false, true] {
            let (ctl, data, cap) = c.ring_ptrs(li, de, self.me_g, reply);
            // SAFETY: the ring was initialised by its owner before it published the
            // slot open (`region::create` for a slot made at init; `open_endpoint`,
            // whose `Release` store of `OPEN` the `Acquire` load above read); this
            // endpoint is its only producer.
            let p = Some(unsafe { Producer::new(ctl, data, cap) });
            if reply {
                self.rep[g] = p;
            } else {
                self.req[g] = p;
            }
        }
        if self.me_runtime {
            m.contacts(l, de).fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Checks that slot `g`, one made at run time, is open.
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] naming the state.
    #[cold]
    #[inline(never)]
    pub(super) fn check_open(&self, g: usize) -> Result<(), ConduitError> {
        let dst = self.dst[g];
        let c = &self.conduit;
        let li = c.local_of[dst.rank as usize] as usize;
        c.slot_open(li, dst)
    }

    /// The request producer to slot `g`, connecting on first contact.
    #[inline(always)]
    pub(super) fn req(&mut self, g: usize) -> Result<&mut Producer, ConduitError> {
        if self.req[g].is_none() {
            self.connect(g)?;
        }
        Ok(self.req[g].as_mut().expect("connected"))
    }

    /// `msg`'s ring record body, encoded into a buffer of its own (a Long's payload is
    /// written to the destination's segment now, as `put` would).
    #[cold]
    fn encoded(&self, g: usize, msg: &OutMsg<'_>) -> Vec<u8> {
        let len = body_len(msg);
        let mut buf = vec![0u64; len.div_ceil(8)];
        // SAFETY: `buf` has `len` bytes (rounded up), 8-byte aligned.
        unsafe { encode(buf.as_mut_ptr().cast(), msg, self.segs[g]) };
        // SAFETY: a u64 buffer viewed as its bytes.
        unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len) }.to_vec()
    }

    #[cold]
    fn defer(&mut self, g: usize, msg: &OutMsg<'_>) {
        let bytes = self.encoded(g, msg);
        self.pending[g].push_back((user_word(msg), bytes));
        self.npending += 1;
    }

    /// Whether the overflow to `g` can take `len` more bytes.
    #[inline]
    pub(super) fn ovf_room(&self, g: usize, len: usize) -> bool {
        self.ovf_bytes[g].saturating_add(kept_len(len)) <= self.ovf_cap
    }

    /// A request whose ring is full, or which must wait behind earlier ones kept for
    /// the same destination: sends what the ring takes now, then the request if nothing
    /// is left before it, else keeps it if the overflow has room.
    #[cold]
    #[inline(never)]
    pub(super) fn inject_slow(
        &mut self,
        g: usize,
        msg: &OutMsg<'_>,
    ) -> Result<Injected, ConduitError> {
        if !self.ovf[g].is_empty() {
            self.flush_ovf(g);
        }
        let seg = self.segs[g];
        if self.ovf[g].is_empty() && put(self.req(g)?, msg, seg) {
            self.bells[g].get().ring();
            return Ok(Injected::Sent);
        }
        let len = body_len(msg);
        if !self.ovf_room(g, len) {
            return Ok(Injected::WouldBlock);
        }
        let bytes = self.encoded(g, msg);
        self.ovf[g].push_back((user_word(msg), bytes));
        self.ovf_bytes[g] += kept_len(len);
        self.novf += 1;
        Ok(Injected::Sent)
    }

    /// Moves the requests kept for `g` into its ring, in order, as far as it has room.
    #[cold]
    pub(super) fn flush_ovf(&mut self, g: usize) {
        // Requests to an endpoint made at run time that has closed since: nobody will
        // take them.
        if self.runtime[g] && self.check_open(g).is_err() {
            self.novf -= self.ovf[g].len();
            self.ovf[g].clear();
            self.ovf_bytes[g] = 0;
            return;
        }
        let Some(req) = self.req[g].as_mut() else {
            return;
        };
        let mut sent = false;
        while let Some((user, body)) = self.ovf[g].front() {
            if !req.push(*user, &[body]) {
                break;
            }
            self.ovf_bytes[g] -= kept_len(body.len());
            self.ovf[g].pop_front();
            self.novf -= 1;
            sent = true;
        }
        if sent {
            self.bells[g].get().ring();
        }
    }

    /// [`flush_ovf`](Self::flush_ovf) for every destination with requests kept.
    #[cold]
    pub(super) fn flush_all_ovf(&mut self) {
        for g in 0..self.ovf.len() {
            if !self.ovf[g].is_empty() {
                self.flush_ovf(g);
            }
        }
    }

    #[cold]
    pub(super) fn flush(&mut self) {
        for g in 0..self.pending.len() {
            // Replies deferred to an endpoint made at run time that has closed since:
            // nobody will take them.
            if !self.pending[g].is_empty() && self.runtime[g] && self.check_open(g).is_err() {
                self.npending -= self.pending[g].len();
                self.pending[g].clear();
                continue;
            }
            let mut sent = false;
            let Some(rep) = self.rep[g].as_mut() else {
                continue;
            };
            while let Some((user, body)) = self.pending[g].front() {
                if !rep.push(*user, &[body]) {
                    break;
                }
                self.pending[g].pop_front();
                self.npending -= 1;
                sent = true;
            }
            if sent {
                self.bells[g].get().ring();
            }
        }
    }
}

impl ReplyTx for Tx {
    #[inline]
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        let g = self.g(msg.dst());
        if self.rep[g].is_none() && self.connect(g).is_err() {
            // A requester made at run time that has closed since: nobody can take the
            // reply, which is dropped.
            return Ok(());
        }
        let seg = self.segs[g];
        if (self.npending == 0 || self.pending[g].is_empty())
            && put(self.rep[g].as_mut().expect("connected"), msg, seg)
        {
            self.bells[g].get().ring();
        } else if !(self.runtime[g] && self.check_open(g).is_err()) {
            self.defer(g, msg);
        }
        Ok(())
    }
}
