//! Delta transfers (seed 001, delta send-recv): a buffer whose transfers to a
//! destination carry only what changed since the last transfer there, sent in
//! increments as the program produces them, with the program's writes watched either
//! by the operating system (write protection) or by the program's own marks.
#![allow(unsafe_code)]

use gex_sync::atomic::{AtomicUsize, Ordering};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use gex_core::Blocking;
use gex_core::Endpoint;
use gex_core::spi::Conduit;
use gex_rma::{GlobalPtr, RmaExt};

use crate::buf::OverlapBuf;
use crate::error::OverlapError;
use crate::layer::{self, Dir, Job, backoff, with};
use crate::model::{self, Decomp};
use crate::ranges::RangeSet;
use crate::sys::{self, Prot};
use crate::table::{CLEAN, READY, SENT};

/// How a [`DeltaBuf`] learns which bytes the program changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracking {
    /// The program marks the ranges it wrote ([`DeltaBuf::mark`],
    /// [`DeltaExt::delta_mark`]); byte-exact, no page faults. A write not marked is
    /// not sent (the destination keeps its old bytes there).
    Annotated,
    /// The operating system: after a transfer the buffer is read-only, the first
    /// write to a page faults and the fault handler marks the page changed and makes
    /// it writable again (one fault per page per transfer). Page-granular.
    OsTriggered,
}

/// What a delta send carried (the sends of one epoch: its flushes and its end).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaStats {
    /// Bytes copied to the destination.
    pub bytes: usize,
    /// Contiguous byte runs copied.
    pub runs: usize,
    /// Sends (each a group of pages moved as one, at most the delta size).
    pub sends: usize,
    /// Whether the end sent the whole rest of the buffer (the first transfer to a
    /// destination, or most of the buffer changed: `GEX_OVERLAP_DELTA_WHOLE`).
    pub whole: bool,
}

/// The open epoch of a [`DeltaBuf`] (between [`DeltaExt::delta_begin`] and
/// [`DeltaExt::delta_end`]).
#[derive(Debug)]
struct Epoch {
    dst: GlobalPtr<u8>,
    /// The address of the destination's first byte in this process (its segment is
    /// mapped here), or `None`: sent through gex-rma during the calls.
    remote: Option<usize>,
    /// The first transfer to this destination: everything is sent.
    full: bool,
    /// Flush threshold and send size (bytes, whole pages).
    delta: usize,
    /// Send the whole rest when at least this percentage of the buffer changed.
    whole_pct: u32,
    stats: DeltaStats,
    /// The first misuse seen (a byte offset), reported by `delta_end`.
    misuse: Option<usize>,
}

/// A buffer for delta transfers: an [`OverlapBuf`](crate::OverlapBuf)'s memory (two
/// views of one memory file, page-aligned, zero-filled at creation) plus the record of
/// what changed since its last transfer. It dereferences to `[u8]`.
///
/// A transfer of it ([`DeltaExt::delta_put`], or an epoch
/// [`delta_begin`](DeltaExt::delta_begin) … [`delta_end`](DeltaExt::delta_end) …
/// [`delta_wait`](DeltaExt::delta_wait)) copies it to a region of the same length in
/// a segment; the destination keeps that copy, so the next transfer *to the same
/// destination* carries only the changed bytes (a transfer to another destination
/// carries everything). Nothing else must write the destination region in between
/// (nothing can check that).
///
/// Inside an epoch, what the program has finished can be sent early
/// ([`delta_flush`](DeltaExt::delta_flush), or automatically by
/// [`delta_mark`](DeltaExt::delta_mark) once a delta's worth is marked), so the copy
/// overlaps the computation of the rest. Writing a range already sent in the epoch is
/// a misuse: `delta_end` reports it as [`OverlapError::WrittenAfterSend`] (and sends
/// the range again, so the destination ends up with the final bytes; what a receiver
/// read before is another matter, which is why it is an error).
///
/// Pages being sent are read-only; a write to one waits (in the fault handler) until
/// its send has left. In [`Tracking::OsTriggered`] mode the pages stay read-only
/// after the transfer and a write faults once per page to record the change. A
/// system call writing into such a page fails with `EFAULT` (the kernel does not
/// fault on the program's behalf): write the bytes from Rust first, or into another
/// buffer.
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
/// use gex_overlap::{DeltaBuf, DeltaExt, Overlap, Tracking};
/// use gex_rma::{GlobalPtr, Rma};
///
/// let client = ClientBuilder::new().layer::<Rma>().layer::<Overlap>()
///     .segment_size(1 << 20).init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let dst = GlobalPtr::<u8>::new(ep.addr(), 0);
/// let mut buf = DeltaBuf::new(64 << 10, Tracking::OsTriggered)?;
/// buf.fill(1);
/// let first = ep.delta_put(dst, &mut buf)?; // the first transfer: everything
/// assert_eq!(first.bytes, 64 << 10);
/// buf[100] = 2; // faults once: the page is recorded as changed
/// let next = ep.delta_put(dst, &mut buf)?; // only that page crosses
/// assert_eq!(next.bytes, gex_overlap::page_size());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeltaBuf {
    buf: OverlapBuf,
    mode: Tracking,
    /// Annotated: ranges marked and not sent yet.
    marked: RangeSet,
    /// Ranges sent in the open epoch.
    sent: RangeSet,
    /// The destination of the last transfer (rank, endpoint, offset).
    last: Option<(u32, u16, usize)>,
    epoch: Option<Epoch>,
    /// Sends of this buffer not complete yet.
    inflight: Arc<AtomicUsize>,
}

impl fmt::Debug for DeltaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaBuf")
            .field("buf", &self.buf)
            .field("mode", &self.mode)
            .field("epoch", &self.epoch.is_some())
            .finish()
    }
}

impl DeltaBuf {
    /// A zero-filled delta buffer of `len` bytes. Its first transfer to any
    /// destination sends everything.
    ///
    /// # Errors
    /// As [`OverlapBuf::new`](crate::OverlapBuf::new).
    pub fn new(len: usize, mode: Tracking) -> Result<DeltaBuf, OverlapError> {
        Ok(DeltaBuf {
            buf: OverlapBuf::new(len)?,
            mode,
            marked: RangeSet::new(),
            sent: RangeSet::new(),
            last: None,
            epoch: None,
            inflight: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// How the buffer's writes are tracked.
    pub fn mode(&self) -> Tracking {
        self.mode
    }

    /// Whether an epoch is open ([`DeltaExt::delta_begin`] without its
    /// [`delta_end`](DeltaExt::delta_end) yet).
    pub fn in_epoch(&self) -> bool {
        self.epoch.is_some()
    }

    /// Records that the program wrote `self[offset..offset+len]`: part of the next
    /// send ([`Tracking::Annotated`]; in [`Tracking::OsTriggered`] mode a mark adds
    /// the range too, with the pages the handler saw written). Marks merge into runs.
    ///
    /// # Errors
    /// [`OverlapError::OutOfBuffer`]; [`OverlapError::WrittenAfterSend`] if the range
    /// overlaps one already sent in the open epoch (the range is recorded all the
    /// same and sent again at the epoch's end, which reports the misuse too).
    ///
    /// ```
    /// let mut b = gex_overlap::DeltaBuf::new(8192, gex_overlap::Tracking::Annotated)?;
    /// b[10..20].fill(3);
    /// b.mark(10, 10)?;
    /// b.mark(20, 5)?; // merges with the first
    /// assert_eq!(b.changed_bytes(), 15);
    /// # Ok::<(), gex_overlap::OverlapError>(())
    /// ```
    pub fn mark(&mut self, offset: usize, len: usize) -> Result<(), OverlapError> {
        let end = offset.checked_add(len).filter(|&e| e <= self.len()).ok_or(
            OverlapError::OutOfBuffer {
                offset,
                len,
                buf_len: self.len(),
            },
        )?;
        self.marked.insert(offset, end);
        if let Some(e) = &mut self.epoch {
            if let Some(at) = self.sent.first_overlap(offset, end) {
                e.misuse.get_or_insert(at);
                return Err(OverlapError::WrittenAfterSend { offset: at });
            }
        }
        Ok(())
    }

    /// The bytes the next send would carry if no epoch had sent anything yet and the
    /// destination were the last one: the marked bytes ([`Tracking::Annotated`]), or
    /// the changed pages' bytes and the marked ones ([`Tracking::OsTriggered`]).
    pub fn changed_bytes(&self) -> usize {
        self.changed().bytes()
    }

    /// What changed and is not sent yet.
    fn changed(&self) -> RangeSet {
        let mut set = self.marked.clone();
        if self.mode == Tracking::OsTriggered {
            let page = sys::page_size();
            for (first, n) in self.buf.shared.region.table.runs_in(READY) {
                set.insert(first * page, ((first + n) * page).min(self.len()));
            }
        }
        let sent = &self.sent;
        for &(s, e) in sent.runs() {
            set.remove(s, e);
        }
        set
    }
}

impl Deref for DeltaBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl DerefMut for DeltaBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

/// The system page size (what page-granular tracking counts in).
pub fn page_size() -> usize {
    sys::page_size()
}

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

    /// Closes the epoch: starts sending everything changed and not sent yet (the
    /// whole rest of the buffer on the first transfer to this destination, or when at
    /// least `GEX_OVERLAP_DELTA_WHOLE` percent of it changed) and returns at once. A
    /// write to a page still being sent waits for that page only.
    ///
    /// # Errors
    /// [`OverlapError::NoEpoch`]; [`OverlapError::WrittenAfterSend`] if the program
    /// wrote (or marked) a range already sent in the epoch (everything is sent all
    /// the same, that range included, and the epoch is closed); as
    /// [`delta_flush`](Self::delta_flush).
    fn delta_end(&mut self, buf: &mut DeltaBuf) -> Result<DeltaStats, OverlapError>;

    /// Waits until every send of `buf` is complete at the destination (closing the
    /// open epoch first, as [`delta_end`](Self::delta_end)).
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

fn wait_buf<C: Conduit>(ep: &mut Endpoint<C>, buf: &DeltaBuf) {
    let mut spins = 0u32;
    while buf.inflight.load(Ordering::Acquire) != 0 {
        backoff(ep, &mut spins);
    }
}

impl<C: Conduit> DeltaExt for Endpoint<C> {
    fn delta_begin(&mut self, buf: &mut DeltaBuf, dst: GlobalPtr<u8>) -> Result<(), OverlapError> {
        if buf.epoch.is_some() {
            return Err(OverlapError::EpochOpen);
        }
        let len = buf.len();
        let page = sys::page_size();
        let (peer, delta, whole_pct) = with(self, |l, cx| {
            let delta = l.delta.unwrap_or_else(|| {
                model::strip_len(layer::params(), Decomp::Auto, len, page, 0).max(4 * page)
            });
            (cx.peer_segment(dst.addr()), delta, l.delta_whole)
        })?;
        let remote = match peer {
            Some((base, seg_len)) => {
                if dst.offset.checked_add(len).is_none_or(|e| e > seg_len) {
                    return Err(OverlapError::OutOfSegment {
                        offset: dst.offset,
                        len,
                        seg_len,
                    });
                }
                Some(base.as_ptr() as usize + dst.offset)
            }
            // gex-rma checks the range at each put.
            None => None,
        };
        wait_buf(self, buf);
        let key = (dst.rank, dst.ep, dst.offset);
        buf.sent.clear();
        buf.epoch = Some(Epoch {
            dst,
            remote,
            full: buf.last != Some(key),
            delta: delta.div_ceil(page) * page,
            whole_pct,
            stats: DeltaStats::default(),
            misuse: None,
        });
        buf.last = None;
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
        send_set(self, buf, &set, SENT)
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
        let r = send_set(self, buf, &set, after);
        let e = buf.epoch.take().expect("checked above");
        buf.sent.clear();
        r?;
        buf.last = Some((e.dst.rank, e.dst.ep, e.dst.offset));
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

/// What a flush sends now: the whole pages marked (annotated) or written (OS) and
/// not sent in the epoch.
fn ready_pages(buf: &DeltaBuf) -> RangeSet {
    let page = sys::page_size();
    let len = buf.len();
    let mut set = buf.marked.whole_pages(page, len);
    if buf.mode == Tracking::OsTriggered {
        for (first, n) in buf.buf.shared.region.table.runs_in(READY) {
            set.insert(first * page, ((first + n) * page).min(len));
        }
    }
    // Pages already sent (a misuse marked again) wait for the end.
    for &(s, e) in buf.sent.runs() {
        let s = s / page * page;
        let e = (e.div_ceil(page) * page).min(len);
        set.remove(s, e);
    }
    set
}

/// One send: the pages `[off, off+len)` (whole pages, the last one possibly short),
/// each touched by one of `pieces`.
struct Span {
    off: usize,
    end: usize,
    pieces: Vec<(usize, usize)>,
}

/// Splits `set` into sends of at most `delta` bytes (page-aligned chunks); pieces that
/// share or neighbour a page go in one send.
fn spans(set: &RangeSet, delta: usize, page: usize, len: usize) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for &(s, e) in set.runs() {
        let mut at = s;
        while at < e {
            let cut = ((at / delta + 1) * delta).min(e);
            let (p_first, p_end) = (at / page * page, (cut.div_ceil(page) * page).min(len));
            match out.last_mut() {
                Some(sp) if p_first <= sp.end && at / delta == (sp.off / delta) => {
                    sp.end = sp.end.max(p_end);
                    sp.pieces.push((at, cut - at));
                }
                _ => out.push(Span {
                    off: p_first,
                    end: p_end,
                    pieces: vec![(at, cut - at)],
                }),
            }
            at = cut;
        }
    }
    out
}

/// Sends `set` to the open epoch's destination; the pages end in state `after`.
fn send_set<C: Conduit>(
    ep: &mut Endpoint<C>,
    buf: &mut DeltaBuf,
    set: &RangeSet,
    after: u32,
) -> Result<(), OverlapError> {
    let page = sys::page_size();
    let len = buf.len();
    let (dst, remote, delta) = match &buf.epoch {
        Some(e) => (e.dst, e.remote, e.delta),
        None => return Err(OverlapError::NoEpoch),
    };
    let shared = buf.buf.shared.clone();
    let region = &shared.region;
    for sp in spans(set, delta, page, len) {
        let (first, n) = (sp.off / page, (sp.end - sp.off).div_ceil(page));
        region
            .table
            .claim_from(first, n, |s| s == READY || s == CLEAN)
            .map_err(|page| OverlapError::Overlapping { page })?;
        region.generation.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = shared.map.protect(sp.off, sp.end - sp.off, Prot::Read) {
            layer::retire_strip(&shared, sp.off, sp.end - sp.off, page);
            return Err(OverlapError::Os(e));
        }
        let bytes: usize = sp.pieces.iter().map(|p| p.1).sum();
        let runs = sp.pieces.len();
        match remote {
            Some(base) => {
                let job = Job {
                    shared: shared.clone(),
                    dir: Dir::Put,
                    remote: base + sp.off,
                    off: sp.off,
                    len: sp.end - sp.off,
                    strip: sp.end - sp.off,
                    pieces: sp.pieces,
                    after,
                    done: Some(buf.inflight.clone()),
                };
                let inflight = buf.inflight.clone();
                let sent = with(ep, |l, _| {
                    let all = l.inflight.clone();
                    let tx = l.sender()?;
                    all.fetch_add(1, Ordering::AcqRel);
                    inflight.fetch_add(1, Ordering::AcqRel);
                    tx.send(job).map_err(|_| {
                        all.fetch_sub(1, Ordering::AcqRel);
                        inflight.fetch_sub(1, Ordering::AcqRel);
                        OverlapError::MoverGone
                    })
                })?;
                if let Err(e) = sent {
                    layer::retire_strip(&shared, sp.off, sp.end - sp.off, page);
                    return Err(e);
                }
            }
            None => {
                // Not mapped here: put each piece now through gex-rma, from the
                // transfer view of the claimed (read-only) pages.
                let mut res = Ok(());
                for &(off, plen) in &sp.pieces {
                    // SAFETY: the piece lies in pages claimed by this call and made
                    // read-only in the user view, inside the mapping that `shared`
                    // keeps alive: nobody writes these bytes during the put.
                    let view =
                        unsafe { std::slice::from_raw_parts(shared.map.xfer().add(off), plen) };
                    let to = GlobalPtr::<u8>::new(dst.addr(), dst.offset + off);
                    if let Err(e) = ep.put(to, view, Blocking) {
                        res = Err(OverlapError::Rma(e));
                        break;
                    }
                }
                if res.is_err() {
                    layer::retire_strip(&shared, sp.off, sp.end - sp.off, page);
                    return res;
                }
                layer::finish_delta(&shared, sp.off, sp.end - sp.off, page, after);
            }
        }
        if let Some(e) = &mut buf.epoch {
            e.stats.bytes += bytes;
            e.stats.runs += runs;
            e.stats.sends += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cut_at_the_delta_and_group_pages() {
        let mut set = RangeSet::new();
        set.insert(10, 20); // page 0
        set.insert(30, 40); // page 0 too: same send
        set.insert(100, 300); // pages 1..=2 (page 100 bytes), next to page 0
        set.insert(1000, 1010); // far away
        let sp = spans(&set, 200, 100, 1050);
        let got: Vec<_> = sp
            .iter()
            .map(|s| (s.off, s.end, s.pieces.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 200, vec![(10, 10), (30, 10), (100, 100)]),
                (200, 300, vec![(200, 100)]),
                (1000, 1050, vec![(1000, 10)]),
            ]
        );
    }
}
