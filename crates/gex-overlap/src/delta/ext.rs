//! [`DeltaExt`], delta transfers on an endpoint: the sender's begin, end and wait,
//! the receiver's side, and the marks.

use super::send::{begin, queue, ready_pages, send_set};
use super::*;

/// Delta transfers on an endpoint (see [`DeltaBuf`]). The sender's side of seed 001's
/// delta send: [`delta_begin`](Self::delta_begin) before the computation that
/// produces the data, [`delta_end`](Self::delta_end) after it,
/// [`delta_wait`](Self::delta_wait) when the data must have arrived.
pub trait DeltaExt {
    /// Opens an epoch of `buf` towards `dst` (a region of `buf.len()` bytes in a
    /// segment). Waits for the buffer's earlier sends to complete first.
    ///
    /// # Errors
    /// [`OverlapError::EpochOpen`] (an epoch of `buf` is open),
    /// [`OverlapError::OutOfSegment`] (the region does not fit the target's segment),
    /// [`OverlapError::NotAttached`].
    fn delta_begin(&mut self, buf: &mut DeltaBuf, dst: GlobalPtr<u8>) -> Result<(), OverlapError>;

    /// Opens an epoch of `buf` towards a receive window (seed 001's delta send): as
    /// [`delta_begin`](Self::delta_begin), and each send also tells the receiver which
    /// pages arrived, so its [`delta_recv`](Self::delta_recv) retires them one by one;
    /// [`delta_end`](Self::delta_end) tells it the epoch is complete (pages not sent
    /// did not change). `window` points at the receiver's [`DeltaRecv::window`]. In
    /// a segment this process maps (smp, thread ranks, the same-host ranks of a
    /// hybrid ofi job) the mover copies the pages and stores their words; in one it
    /// does not (another host over ofi), the sends go through gex-rma during the
    /// calls ([`delta_flush`](Self::delta_flush), [`delta_end`](Self::delta_end)),
    /// each followed by a put of its pages' arrival words. Waits until the receiver
    /// has received the previous epoch (its `delta_recv` posted and complete): the
    /// window is written again only then.
    ///
    /// `buf` may be shorter than the receiver's buffer (a variable-size message:
    /// [`delta_recv_wait`](Self::delta_recv_wait) tells the receiver its length).
    ///
    /// # Errors
    /// As [`delta_begin`](Self::delta_begin) ([`OverlapError::OutOfSegment`] for the
    /// window's whole length, [`DeltaRecv::window_len`]); [`OverlapError::Unaligned`]
    /// (window offset not page-aligned); [`OverlapError::OutOfBuffer`] (`buf` is
    /// longer than the window's buffer, or no window was made there: `buf_len` 0);
    /// [`OverlapError::Rma`] (reading an unmapped receiver's window words).
    fn delta_send_begin(
        &mut self,
        buf: &mut DeltaBuf,
        window: GlobalPtr<u8>,
    ) -> Result<(), OverlapError>;

    /// Makes a receive window at byte `offset` of this endpoint's segment
    /// ([`DeltaRecv::window_len`]`(len)` bytes, page-aligned) with a receive buffer of
    /// `len` bytes, and zeroes its control block: make it before the sender's first
    /// [`delta_send_begin`](Self::delta_send_begin) to it (a barrier in between).
    ///
    /// A job with ranks whose segments this process does not map (other hosts) sends
    /// to the window through gex-rma, which completes here only while the endpoint is
    /// served: the endpoint needs a progress thread then (a thread touching a pending
    /// page waits in the fault handler, which cannot serve it).
    ///
    /// # Errors
    /// [`OverlapError::Unaligned`], [`OverlapError::OutOfSegment`],
    /// [`OverlapError::NotAttached`], [`OverlapError::NeedsProgressThread`]; as
    /// [`OverlapBuf::new`](crate::OverlapBuf::new).
    fn delta_recv_window(&mut self, offset: usize, len: usize) -> Result<DeltaRecv, OverlapError>;

    /// Posts the receive of the window's next epoch (seed 001's delta receive) and
    /// returns at once: the receive buffer's pages are inaccessible until they arrive,
    /// and the first touch of one waits for that page only (in the fault handler); the
    /// pages the sender did not change retire when its epoch ends. No wait call is
    /// needed. Waits first for the previous receive of `r` to be complete. A posted
    /// receive counts as a transfer of the endpoint for
    /// [`OverlapExt::retire_all`](crate::OverlapExt::retire_all).
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`], [`OverlapError::Os`],
    /// [`OverlapError::MoverGone`].
    fn delta_recv(&mut self, r: &mut DeltaRecv) -> Result<(), OverlapError>;

    /// Waits until every page of `r`'s posted receive has arrived (before handing the
    /// buffer to a system call, which gets `EFAULT` on a pending page), and returns
    /// the message's length: the sender's buffer may be shorter than the receive
    /// buffer (seed 001's variable-size messages); the pages past it keep the bytes of
    /// the last longer message (0 before any). 0 when no receive was posted yet.
    ///
    /// # Errors
    /// None today (a `Result` for the future).
    fn delta_recv_wait(&mut self, r: &mut DeltaRecv) -> Result<usize, OverlapError>;

    /// A cascade's step (seed 001's chained pipelines): fills `out` (in an open
    /// epoch, usually towards the next rank's window) chunk by chunk from the posted
    /// receives `inputs` as their pages arrive, and sends each chunk as soon as it is
    /// computed, without waiting for whole buffers. For each chunk `[at, at+n)`
    /// (`chunk` bytes rounded up to whole pages; 0: the epoch's delta size) it calls
    /// `f(at, inputs' bytes [at, at+n), out's bytes [at, at+n))`: reading an input
    /// waits for its pages only. With one input and a copy, `f` forwards (a chain or
    /// ring); with the children's inputs and an addition, it reduces (an array reduce
    /// up a tree). Call [`delta_end`](Self::delta_end) after it.
    ///
    /// # Errors
    /// [`OverlapError::NoEpoch`]; [`OverlapError::OutOfBuffer`] if an input is shorter
    /// than `out`; as [`delta_flush`](Self::delta_flush).
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// use gex_overlap::{DeltaBuf, DeltaExt, Overlap, Tracking};
    /// use gex_rma::{GlobalPtr, Rma};
    ///
    /// let client = ClientBuilder::new().layer::<Rma>().layer::<Overlap>()
    ///     .segment_size(1 << 20).init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// let len = 16 << 10;
    /// // One stage: receive into `rx`, add 1 to every byte, send on to `rx2`.
    /// let mut rx = ep.delta_recv_window(0, len)?;
    /// let mut rx2 = ep.delta_recv_window(256 << 10, len)?;
    /// let (w1, w2) = (GlobalPtr::new(ep.addr(), 0), GlobalPtr::new(ep.addr(), 256 << 10));
    /// let mut src = DeltaBuf::new(len, Tracking::Annotated)?;
    /// let mut mid = DeltaBuf::new(len, Tracking::Annotated)?;
    /// ep.delta_recv(&mut rx)?;
    /// ep.delta_recv(&mut rx2)?;
    /// ep.delta_send_begin(&mut src, w1)?;
    /// src.fill(41);
    /// src.mark(0, len)?;
    /// ep.delta_end(&mut src)?;
    /// ep.delta_send_begin(&mut mid, w2)?;
    /// ep.delta_relay(&[&rx], &mut mid, 0, |_, ins, out| {
    ///     for (o, i) in out.iter_mut().zip(ins[0]) {
    ///         *o = i + 1;
    ///     }
    /// })?;
    /// ep.delta_end(&mut mid)?;
    /// assert!(rx2.iter().all(|&b| b == 42));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn delta_relay<F>(
        &mut self,
        inputs: &[&DeltaRecv],
        out: &mut DeltaBuf,
        chunk: usize,
        f: F,
    ) -> Result<(), OverlapError>
    where
        F: FnMut(usize, &[&[u8]], &mut [u8]);

    /// [`DeltaBuf::mark`], then, inside an epoch, sends the whole pages marked so far
    /// once they amount to a delta (`GEX_OVERLAP_DELTA`): the pipelined send of
    /// annotated code.
    ///
    /// # Errors
    /// As [`DeltaBuf::mark`], and as [`delta_flush`](Self::delta_flush).
    fn delta_mark(
        &mut self,
        buf: &mut DeltaBuf,
        offset: usize,
        len: usize,
    ) -> Result<(), OverlapError>;

    /// Inside an epoch, starts sending what is finished now: the whole pages marked
    /// ([`Tracking::Annotated`]) or the pages written ([`Tracking::OsTriggered`])
    /// since the epoch began and not sent yet. They become read-only for the rest of
    /// the epoch: writing them again is a misuse that
    /// [`delta_end`](Self::delta_end) reports.
    ///
    /// # Errors
    /// [`OverlapError::NoEpoch`], [`OverlapError::NotAttached`],
    /// [`OverlapError::Os`], [`OverlapError::MoverGone`], [`OverlapError::Rma`]
    /// (peers not mapped here: sent during the call).
    fn delta_flush(&mut self, buf: &mut DeltaBuf) -> Result<(), OverlapError>;

    /// Closes the epoch: waits for the epoch's early sends, then copies everything
    /// changed and not sent yet (the whole rest of the buffer on the first transfer
    /// to this destination, or when at least `GEX_OVERLAP_DELTA_WHOLE` percent of it
    /// changed) during the call: the last piece, which a hand-off to the mover
    /// thread would only delay. To a receive window, the receiver then sees the
    /// epoch complete.
    ///
    /// # Errors
    /// [`OverlapError::NoEpoch`]; [`OverlapError::WrittenAfterSend`] if the program
    /// wrote (or marked) a range already sent in the epoch (everything is sent all
    /// the same, that range included, and the epoch is closed); as
    /// [`delta_flush`](Self::delta_flush).
    fn delta_end(&mut self, buf: &mut DeltaBuf) -> Result<DeltaStats, OverlapError>;

    /// Waits until every send of `buf` is complete at the destination (closing the
    /// open epoch first, as [`delta_end`](Self::delta_end)). After `delta_end` to a
    /// peer whose segment is mapped here, they are already.
    ///
    /// # Errors
    /// As [`delta_end`](Self::delta_end) when it closes an epoch.
    fn delta_wait(&mut self, buf: &mut DeltaBuf) -> Result<(), OverlapError>;

    /// A blocking delta put: begin, end and wait. Returns what was sent.
    ///
    /// # Errors
    /// As [`delta_begin`](Self::delta_begin) and [`delta_end`](Self::delta_end).
    fn delta_put(
        &mut self,
        dst: GlobalPtr<u8>,
        buf: &mut DeltaBuf,
    ) -> Result<DeltaStats, OverlapError>;
}

pub(crate) fn wait_buf<C: Conduit>(ep: &mut Endpoint<C>, buf: &DeltaBuf) {
    let mut spins = 0u32;
    while buf.inflight.load(Ordering::Acquire) != 0 {
        backoff(ep, &mut spins);
    }
}

impl<C: Conduit> DeltaExt for Endpoint<C> {
    fn delta_begin(&mut self, buf: &mut DeltaBuf, dst: GlobalPtr<u8>) -> Result<(), OverlapError> {
        begin(self, buf, dst, false)
    }

    fn delta_send_begin(
        &mut self,
        buf: &mut DeltaBuf,
        window: GlobalPtr<u8>,
    ) -> Result<(), OverlapError> {
        begin(self, buf, window, true)
    }

    fn delta_recv_window(&mut self, offset: usize, len: usize) -> Result<DeltaRecv, OverlapError> {
        let page = sys::page_size();
        if offset % page != 0 {
            return Err(OverlapError::Unaligned { offset, page });
        }
        let me = self.addr();
        let (own, unmapped) = with(self, |_, cx| {
            let unmapped =
                (0..cx.size()).find(|&r| cx.peer_segment(gex_core::EpAddr::new(r, 0)).is_none());
            (cx.peer_segment(me), unmapped)
        })?;
        // (An endpoint's own segment is always mapped in its process: `Cx::peer_segment`.
        // Were it not, the window would not fit a segment of length 0.)
        let (base, seg_len) = own.unwrap_or((std::ptr::NonNull::dangling(), 0));
        if let Some(rank) = unmapped
            && !self.has_progress_thread()
        {
            return Err(OverlapError::NeedsProgressThread { rank });
        }
        let wlen = DeltaRecv::window_len(len);
        if offset.checked_add(wlen).is_none_or(|e| e > seg_len) {
            return Err(OverlapError::OutOfSegment {
                offset,
                len: wlen,
                seg_len,
            });
        }
        let ctl = base.as_ptr() as usize + offset;
        let shadow = ctl + page;
        let arrivals = ctl + arrivals_offset(len);
        // SAFETY: the header and the arrival words lie in this endpoint's own segment
        // (checked just above), mapped while the endpoint lives; byte-wise atomic
        // stores and `gex_sync::word` (a sender may read them: the program makes the
        // window before a sender uses it).
        unsafe {
            gex_sync::copy::atomic_fill(ctl as *mut u8, 0, 64);
            gex_sync::copy::atomic_fill(arrivals as *mut u8, 0, wlen - arrivals_offset(len));
            gex_sync::word::store64(
                (ctl + layer::WINDOW_LEN_WORD) as *mut u8,
                len as u64,
                Ordering::Release,
            );
        }
        Ok(DeltaRecv {
            buf: OverlapBuf::new(len)?,
            offset,
            shadow,
            ctl,
            arrivals,
            epoch: 0,
            inflight: Arc::new(AtomicUsize::new(0)),
            written: true,
        })
    }

    fn delta_recv(&mut self, r: &mut DeltaRecv) -> Result<(), OverlapError> {
        with(self, |_, _| ())?;
        let mut spins = 0u32;
        while r.inflight.load(Ordering::Acquire) != 0 {
            backoff(self, &mut spins);
        }
        let page = sys::page_size();
        let len = r.buf.len_bytes();
        let n = len.div_ceil(page);
        let region = &r.buf.shared.region;
        region
            .table
            .claim(0, n, table::PENDING)
            .map_err(|page| OverlapError::Overlapping { page })?;
        region.generation.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = r.buf.shared.protect(0, len, Prot::None) {
            region.table.retire(0, n);
            return Err(OverlapError::Os(e));
        }
        r.epoch = r.epoch.wrapping_add(1);
        let w = Watch {
            shared: r.buf.shared.clone(),
            shadow: r.shadow,
            ctl: r.ctl,
            arrivals: r.arrivals,
            epoch: r.epoch,
            len,
            left: vec![true; n],
            copy_rest: r.written,
            done: r.inflight.clone(),
        };
        r.written = false;
        if let Err(e) = queue(self, Task::Watch(w), &r.inflight) {
            layer::retire_strip(&r.buf.shared, 0, len, page);
            r.epoch = r.epoch.wrapping_sub(1);
            r.written = true;
            return Err(e);
        }
        Ok(())
    }

    fn delta_recv_wait(&mut self, r: &mut DeltaRecv) -> Result<usize, OverlapError> {
        let mut spins = 0u32;
        while r.inflight.load(Ordering::Acquire) != 0 {
            backoff(self, &mut spins);
        }
        if r.epoch == 0 {
            return Ok(0);
        }
        // SAFETY: a word of the window's header, in this endpoint's own segment
        // (checked at `delta_recv_window`); the sender stored it before the end word
        // that completed the receive (whose completion the `Acquire` load above saw).
        let n = unsafe {
            gex_sync::word::load64(
                (r.ctl + layer::MSG_LEN_WORD) as *const u8,
                Ordering::Acquire,
            )
        };
        Ok(n as usize)
    }

    fn delta_relay<F>(
        &mut self,
        inputs: &[&DeltaRecv],
        out: &mut DeltaBuf,
        chunk: usize,
        mut f: F,
    ) -> Result<(), OverlapError>
    where
        F: FnMut(usize, &[&[u8]], &mut [u8]),
    {
        let Some(e) = &out.epoch else {
            return Err(OverlapError::NoEpoch);
        };
        let len = out.len();
        if let Some(short) = inputs.iter().find(|r| r.len() < len) {
            return Err(OverlapError::OutOfBuffer {
                offset: 0,
                len,
                buf_len: short.len(),
            });
        }
        let page = sys::page_size();
        let chunk = if chunk == 0 {
            e.delta
        } else {
            chunk.div_ceil(page) * page
        };
        let mut at = 0;
        let mut ins: Vec<&[u8]> = Vec::with_capacity(inputs.len());
        while at < len {
            let n = chunk.min(len - at);
            ins.clear();
            ins.extend(inputs.iter().map(|r| &r[at..at + n]));
            f(at, &ins, &mut out[at..at + n]);
            out.mark(at, n)?;
            self.delta_flush(out)?;
            at += n;
        }
        Ok(())
    }

    fn delta_mark(
        &mut self,
        buf: &mut DeltaBuf,
        offset: usize,
        len: usize,
    ) -> Result<(), OverlapError> {
        buf.mark(offset, len)?;
        let Some(e) = &buf.epoch else {
            return Ok(());
        };
        let ready = ready_pages(buf).bytes();
        if ready >= e.delta {
            self.delta_flush(buf)?;
        }
        Ok(())
    }

    fn delta_flush(&mut self, buf: &mut DeltaBuf) -> Result<(), OverlapError> {
        if buf.epoch.is_none() {
            return Err(OverlapError::NoEpoch);
        }
        let set = ready_pages(buf);
        if set.is_empty() {
            return Ok(());
        }
        for &(s, e) in set.runs() {
            buf.marked.remove(s, e);
            buf.sent.insert(s, e);
        }
        send_set(self, buf, &set, SENT, false)
    }

    fn delta_end(&mut self, buf: &mut DeltaBuf) -> Result<DeltaStats, OverlapError> {
        if buf.epoch.is_none() {
            return Err(OverlapError::NoEpoch);
        }
        // The epoch's flushes first: their pages are SENT once they have left.
        wait_buf(self, buf);
        let page = sys::page_size();
        let len = buf.len();
        let shared = buf.buf.shared.clone();
        let table = &shared.region.table;
        // A page sent in the epoch and writable again was written after it was sent
        // (the handler moved it from SENT to READY): a misuse, and changed.
        let mut rewritten = RangeSet::new();
        for &(s, e) in buf.sent.runs() {
            let first = s / page;
            for p in first..e.div_ceil(page) {
                if table.state(p) == READY {
                    rewritten.insert(p * page, ((p + 1) * page).min(len));
                }
            }
        }
        let after = match buf.mode {
            Tracking::Annotated => READY,
            Tracking::OsTriggered => CLEAN,
        };
        // The epoch's sent pages leave SENT: unchanged since (annotated: writable).
        for (first, n) in table.runs_in(SENT) {
            if after == READY {
                layer::retire_strip(&shared, first * page, n * page, page);
            } else {
                table.set(first, n, after);
            }
        }
        let e = buf.epoch.as_mut().expect("checked above");
        if let Some(&(s, _)) = rewritten.runs().first() {
            e.misuse.get_or_insert(s);
        }
        let mut set = buf.marked.union(&rewritten);
        if buf.mode == Tracking::OsTriggered {
            for (first, n) in table.runs_in(READY) {
                set.insert(first * page, ((first + n) * page).min(len));
            }
        }
        let changed = set.bytes() + buf.sent.bytes();
        let whole = e.full || (changed as u128) * 100 >= u128::from(e.whole_pct) * len as u128;
        if whole {
            // Everything not sent in the epoch (what was rewritten, too).
            let mut rest = buf.sent.complement(len);
            for &(s, t) in rewritten.runs() {
                rest.insert(s, t);
            }
            set = rest;
        }
        e.stats.whole = whole;
        buf.marked.clear();
        // The rest is copied during the call (the flushes' sends are complete, so
        // the end word comes after every send of the epoch).
        let mut r = send_set(self, buf, &set, after, true);
        if let (Ok(()), Some(e)) = (&r, buf.epoch.as_ref()) {
            if let Some((ctl, _, epoch)) = e.window {
                layer::store_end(ctl, epoch, len);
            } else if let Some((ctl, arrivals, epoch)) = e.rwindow {
                // Every send's bytes and arrival words at the target, then the
                // message's length, then the end word, each there before the next put
                // starts (as `store_end`'s Release order).
                let dst = e.dst;
                let at = dst.addr();
                r = send::reap(self, buf, dst, arrivals, epoch, true).and_then(|()| {
                    self.put_val(
                        GlobalPtr::<u64>::new(at, ctl + layer::MSG_LEN_WORD),
                        len as u64,
                        Blocking,
                    )
                    .and_then(|()| self.put_val(GlobalPtr::<u32>::new(at, ctl), epoch, Blocking))
                    .map_err(OverlapError::Rma)
                });
            }
        }
        let e = buf.epoch.take().expect("checked above");
        buf.sent.clear();
        // Left only by a failure: not carried into the next epoch.
        buf.rsends.clear();
        buf.rwords.clear();
        r?;
        buf.last = Some(Dest::Seg(e.dst.rank, e.dst.ep, e.dst.offset));
        match e.misuse {
            Some(offset) => Err(OverlapError::WrittenAfterSend { offset }),
            None => Ok(e.stats),
        }
    }

    fn delta_wait(&mut self, buf: &mut DeltaBuf) -> Result<(), OverlapError> {
        let r = if buf.epoch.is_some() {
            self.delta_end(buf).map(|_| ())
        } else {
            Ok(())
        };
        wait_buf(self, buf);
        r
    }

    fn delta_put(
        &mut self,
        dst: GlobalPtr<u8>,
        buf: &mut DeltaBuf,
    ) -> Result<DeltaStats, OverlapError> {
        self.delta_begin(buf, dst)?;
        let r = self.delta_end(buf);
        wait_buf(self, buf);
        r
    }
}
