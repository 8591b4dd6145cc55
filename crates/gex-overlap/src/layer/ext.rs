//! [`OverlapExt`], the operations of gex-overlap on an endpoint, and the helpers the
//! other modules reach the layer with.

use super::demand::transfer;
use super::*;

/// The operations of gex-overlap on an endpoint.
pub trait OverlapExt {
    /// Starts a get of `len` bytes at `src` into `buf[offset..offset+len]` and returns
    /// at once. The destination's pages are protected: the first access to one waits
    /// for the strip holding it only. `offset` must be page-aligned.
    ///
    /// To a peer whose segment this process maps (smp, and the ranks of this host in a
    /// hybrid ofi job) the strips are moved by the layer's mover thread. Otherwise the
    /// get is done during the call (gex-rma, blocking) and nothing stays pending.
    ///
    /// # Errors
    /// [`OverlapError::Unaligned`], [`OverlapError::OutOfBuffer`],
    /// [`OverlapError::OutOfSegment`], [`OverlapError::Overlapping`] (a page of the
    /// range is still pending), [`OverlapError::NotAttached`], [`OverlapError::Os`],
    /// [`OverlapError::Rma`] (fallback path).
    fn get_demand(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError>;

    /// [`get_demand`](Self::get_demand) with **lazy protection** (seed 000): of the
    /// destination's pages only two are protected, the first page of the lowest strip
    /// not landed (the *guard*, which a reader going up the range reaches next) and
    /// the first page of the next strip not landed (the *tripwire*). A fault on the
    /// guard waits for its strip, then moves both on; strips that land before the
    /// reader gets there cost no `mprotect` at all (eager protection: one per strip).
    /// A fault on the tripwire (a jump ahead) falls back to protecting every pending
    /// page, as `get_demand` ([`OverlapBuf::stats`] counts the fallbacks and the
    /// calls saved). A second lazy get into a buffer whose first is pending is
    /// protected eagerly; to a peer whose segment is not mapped here the transfer is
    /// as `get_demand`'s.
    ///
    /// # Safety
    /// Until the range has retired ([`wait_range`](Self::wait_range) of it returned,
    /// or [`retire_all`](Self::retire_all)), every thread accesses the range's pages
    /// **in ascending order from its first page, without skipping one**: a thread
    /// accesses a page only after it accessed every page of the range before it
    /// (accessing again a page it has accessed is fine). The pages of a strip not
    /// landed are accessible except their first: a jump past the guard that misses
    /// the tripwire reads bytes that change afterwards under the program's `&[u8]`
    /// (undefined behaviour). A system call given the range also waits for it first
    /// (`wait_range`), as with `get_demand`.
    ///
    /// # Errors
    /// As [`get_demand`](Self::get_demand).
    unsafe fn get_lazy(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError>;

    /// Starts a put of `buf[offset..offset+len]` to `dst` and returns at once. The
    /// source's pages are read-only until their strip has left: a write to one waits
    /// for that strip only. Complete at the target after
    /// [`retire_all`](Self::retire_all) (or [`wait_range`](Self::wait_range) of the range).
    ///
    /// # Errors
    /// As [`get_demand`](Self::get_demand).
    fn put_demand(
        &mut self,
        dst: GlobalPtr<u8>,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<Issued, OverlapError>;

    /// Waits until no page holding `buf[offset..offset+len]` is pending: call it before
    /// handing the range to a system call (which gets `EFAULT` on a pending page).
    ///
    /// # Errors
    /// [`OverlapError::OutOfBuffer`].
    fn wait_range(
        &mut self,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<(), OverlapError>;

    /// Waits until every demand-driven transfer this endpoint started is complete
    /// (puts at their targets), and every scheduled put and signal
    /// ([`SchedExt::sched_flush`](crate::SchedExt::sched_flush)): call it at
    /// synchronisation points (before a barrier that publishes a put, before `fork`).
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`]; as `sched_flush`.
    fn retire_all(&mut self) -> Result<(), OverlapError>;

    /// Sets how later transfers are split (overrides the model and
    /// `GEX_OVERLAP_STRIP`); `min_split` is the threshold of [`Decomp::Auto`].
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn set_decomp(&mut self, d: Decomp, min_split: usize) -> Result<(), OverlapError>;

    /// The length of the first strip a transfer of `len` bytes would get now.
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn strip_for(&mut self, len: usize) -> Result<usize, OverlapError>;

    /// The strips a transfer of `len` bytes would get now.
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn plan_for(&mut self, len: usize) -> Result<StripPlan, OverlapError>;

    /// Tells the strip model how long the program works on each byte of the data of
    /// a get after it arrives (ns per byte; seed 000's `C(size)/size`), or forgets it
    /// (`None`: the layer's statistics decide, [`model::slower_than_data`]). With a
    /// consumer slower than the data the model may choose variable strips ([`model`]).
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn set_consume_cost(&mut self, ns_per_byte: Option<f64>) -> Result<(), OverlapError>;
}

pub(crate) fn with<C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(&mut Overlap, &mut Cx<'_, C>) -> R,
) -> Result<R, OverlapError> {
    layer::with::<Overlap, C, R>(ep, |l, cx| f(l.get_mut(), cx)).ok_or(OverlapError::NotAttached)
}

impl<C: Conduit> OverlapExt for Endpoint<C> {
    fn get_demand(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError> {
        transfer(self, Dir::Get, buf, offset, src, len, false)
    }

    unsafe fn get_lazy(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError> {
        transfer(self, Dir::Get, buf, offset, src, len, true)
    }

    fn put_demand(
        &mut self,
        dst: GlobalPtr<u8>,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<Issued, OverlapError> {
        transfer(self, Dir::Put, buf, offset, dst, len, false)
    }

    fn wait_range(
        &mut self,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<(), OverlapError> {
        let mut spins = 0u32;
        while buf.is_pending(offset, len)? {
            backoff(self, &mut spins);
        }
        // A lazy transfer that has landed: its guard and tripwire unprotected now
        // (not only when the mover gets there), so that a system call may follow.
        sys::lazy_settle(&buf.shared.region);
        Ok(())
    }

    fn retire_all(&mut self) -> Result<(), OverlapError> {
        self.sched_flush()?;
        let inflight = with(self, |l, _| l.inflight.clone())?;
        let mut spins = 0u32;
        while inflight.load(Ordering::Acquire) != 0 {
            backoff(self, &mut spins);
        }
        Ok(())
    }

    fn set_decomp(&mut self, d: Decomp, min_split: usize) -> Result<(), OverlapError> {
        with(self, |l, _| {
            l.decomp = d;
            l.min_split = min_split;
        })
    }

    fn strip_for(&mut self, len: usize) -> Result<usize, OverlapError> {
        with(self, |l, _| {
            let p = l.plan_for(len);
            if p.count() == 0 {
                len.max(sys::page_size())
            } else {
                p.strip(0).1
            }
        })
    }

    fn plan_for(&mut self, len: usize) -> Result<StripPlan, OverlapError> {
        with(self, |l, _| l.plan_for(len))
    }

    fn set_consume_cost(&mut self, ns_per_byte: Option<f64>) -> Result<(), OverlapError> {
        with(self, |l, _| {
            l.consume = ns_per_byte.filter(|c| c.is_finite() && *c >= 0.0);
        })
    }
}

pub(crate) fn backoff<C: Conduit>(ep: &mut Endpoint<C>, spins: &mut u32) {
    layer::poll(ep);
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *spins = spins.saturating_add(1);
}
