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
use crate::layer::{self, Dir, Job, Task, Watch, backoff, with};
use crate::model::{self, Decomp};
use crate::ranges::RangeSet;
use crate::sys::{self, Prot};
use crate::table::{self, CLEAN, READY, SENT};

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
    /// A send to a receive window: its header's and its first arrival word's
    /// addresses here, and the epoch.
    window: Option<(usize, usize, u32)>,
}

/// Where a [`DeltaBuf`] was last transferred (the destination that holds its copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    /// A region of a segment: rank, endpoint, offset.
    Seg(u32, u16, usize),
    /// Messages on (communicator id, destination rank, tag).
    #[cfg_attr(not(feature = "msg"), allow(dead_code))]
    Msg(u32, u32, u32),
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
    /// The destination of the last transfer.
    pub(crate) last: Option<Dest>,
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
    /// destination sends everything. In [`Tracking::OsTriggered`] mode its pages are
    /// read-only from the start (the first write to each faults once), so that a
    /// flush in the first epoch sends only the pages written in it.
    ///
    /// # Errors
    /// As [`OverlapBuf::new`](crate::OverlapBuf::new).
    pub fn new(len: usize, mode: Tracking) -> Result<DeltaBuf, OverlapError> {
        let buf = OverlapBuf::new(len)?;
        if mode == Tracking::OsTriggered {
            // Watched from the start: a flush in the first epoch sends the pages
            // written in it (the end sends everything anyway).
            let n = len.div_ceil(sys::page_size());
            buf.shared
                .protect(0, len, Prot::Read)
                .map_err(OverlapError::Os)?;
            buf.shared.region.table.set(0, n, CLEAN);
        }
        Ok(DeltaBuf {
            buf,
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

    /// For a transfer of the whole buffer outside an epoch (a delta message) to
    /// `key`: the runs to send (sorted, disjoint `(start, end)`) and whether they are
    /// the whole buffer (the first transfer to `key`, or at least `whole_pct` percent
    /// changed).
    #[cfg(feature = "msg")]
    pub(crate) fn delta_runs(&self, key: Dest, whole_pct: u32) -> (Vec<(usize, usize)>, bool) {
        let len = self.len();
        let set = self.changed();
        let whole = self.last != Some(key)
            || (set.bytes() as u128) * 100 >= u128::from(whole_pct) * len as u128;
        if whole {
            (vec![(0, len)], true)
        } else {
            (set.runs().to_vec(), false)
        }
    }

    /// After a transfer outside an epoch to `key` (a delta message): nothing is
    /// changed any more (marks cleared; OS-triggered: the written pages read-only
    /// again, `CLEAN`, so the next writes are seen), and `key` holds the copy.
    #[cfg(feature = "msg")]
    pub(crate) fn sent_to(&mut self, key: Dest) -> Result<(), OverlapError> {
        self.marked.clear();
        if self.mode == Tracking::OsTriggered {
            let page = sys::page_size();
            let len = self.len();
            let shared = &self.buf.shared;
            for (first, n) in shared.region.table.runs_in(READY) {
                let off = first * page;
                // `&mut self`: no slice of the buffer lives, so nothing writes these
                // pages while they become read-only and CLEAN.
                if let Err(e) = shared.protect(off, ((first + n) * page).min(len) - off, Prot::Read)
                {
                    self.last = None;
                    return Err(OverlapError::Os(e));
                }
                shared.region.table.set(first, n, CLEAN);
            }
        }
        self.last = Some(key);
        Ok(())
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

/// The receive side of seed 001's delta send-recv: a receive buffer (inaccessible
/// pages until they arrive, as a demand-driven get's destination) and its **window**
/// in this endpoint's segment: the *shadow* (the sender's [`DeltaBuf`] is copied there,
/// only what changed in each epoch) and a control block (an arrival word per page, the
/// sender's end word, the receiver's consumed word). Made by
/// [`DeltaExt::delta_recv_window`]; each [`DeltaExt::delta_recv`] receives one epoch of
/// the sender's. It dereferences to `[u8]` (the receive buffer).
///
/// Pages arrive in any order; each retires (becomes readable, its bytes final for
/// this epoch) as soon as its arrival word says so, and the pages the sender did not
/// send retire at the end of its epoch with their last bytes (copied from the shadow
/// if the program wrote the receive buffer since its last receive, or on the first;
/// otherwise they hold them already): a receive of a message of any size needs no
/// cancellation and no wait.
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
/// let mut rx = ep.delta_recv_window(0, len)?;
/// let window = GlobalPtr::<u8>::new(ep.addr(), rx.window());
/// let mut tx = DeltaBuf::new(len, Tracking::Annotated)?;
/// ep.delta_recv(&mut rx)?; // returns at once
/// ep.delta_send_begin(&mut tx, window)?;
/// tx[..100].fill(7);
/// ep.delta_mark(&mut tx, 0, 100)?;
/// ep.delta_end(&mut tx)?;
/// assert_eq!(rx[99], 7); // waits for that page only (here: the epoch's end)
/// ep.delta_wait(&mut tx)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeltaRecv {
    buf: OverlapBuf,
    /// The window's offset in this endpoint's segment.
    offset: usize,
    /// The shadow's, the header's and the first arrival word's addresses here.
    shadow: usize,
    ctl: usize,
    arrivals: usize,
    /// The last epoch posted.
    epoch: u32,
    /// Receives posted and not complete (0 or 1).
    inflight: Arc<AtomicUsize>,
    /// The receive buffer may differ from the shadow outside the pages of the next
    /// epoch: first receive, or written by the program (`DerefMut`) since the last.
    written: bool,
}

impl fmt::Debug for DeltaRecv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaRecv")
            .field("buf", &self.buf)
            .field("window", &self.offset)
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl DeltaRecv {
    /// The bytes a receive window for a `len`-byte buffer takes in the segment: a
    /// header page, the shadow (`len` rounded up to 64) and 4 bytes per page.
    pub fn window_len(len: usize) -> usize {
        arrivals_offset(len) + layer::arrival_word(len.div_ceil(sys::page_size()))
    }

    /// The window's offset in this endpoint's segment (where senders send).
    pub fn window(&self) -> usize {
        self.offset
    }

    /// The number of epochs posted so far.
    pub fn epochs(&self) -> u32 {
        self.epoch
    }

    /// Whether the posted receive is still incomplete (some page not arrived).
    pub fn is_pending(&self) -> bool {
        self.inflight.load(Ordering::Acquire) != 0
    }
}

impl Deref for DeltaRecv {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl DerefMut for DeltaRecv {
    fn deref_mut(&mut self) -> &mut [u8] {
        // The next receive copies every page (not only the changed ones).
        self.written = true;
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

    /// Opens an epoch of `buf` towards a receive window (seed 001's delta send): as
    /// [`delta_begin`](Self::delta_begin), and each send also tells the receiver which
    /// pages arrived, so its [`delta_recv`](Self::delta_recv) retires them one by one;
    /// [`delta_end`](Self::delta_end) tells it the epoch is complete (pages not sent
    /// did not change). `window` points at the receiver's [`DeltaRecv::window`], in a
    /// segment this process maps (smp, thread ranks, the same-host ranks of a hybrid
    /// ofi job). Waits until the receiver has received the previous epoch (its
    /// `delta_recv` posted and complete): the window is written again only then.
    ///
    /// `buf` may be shorter than the receiver's buffer (a variable-size message:
    /// [`delta_recv_wait`](Self::delta_recv_wait) tells the receiver its length).
    ///
    /// # Errors
    /// As [`delta_begin`](Self::delta_begin) ([`OverlapError::OutOfSegment`] for the
    /// window's whole length, [`DeltaRecv::window_len`]); [`OverlapError::Unaligned`]
    /// (window offset not page-aligned); [`OverlapError::Unmapped`] (the receiver's
    /// segment is not mapped here); [`OverlapError::OutOfBuffer`] (`buf` is longer
    /// than the window's buffer, or no window was made there: `buf_len` 0).
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
    /// # Errors
    /// [`OverlapError::Unaligned`], [`OverlapError::OutOfSegment`],
    /// [`OverlapError::NotAttached`]; as [`OverlapBuf::new`](crate::OverlapBuf::new).
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
        let (base, seg_len) = with(self, |_, cx| cx.peer_segment(me))?
            .ok_or(OverlapError::Unmapped { rank: me.rank })?;
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
        let r = send_set(self, buf, &set, after, true);
        if let (Ok(()), Some((ctl, _, epoch))) = (&r, buf.epoch.as_ref().and_then(|e| e.window)) {
            layer::store_end(ctl, epoch, len);
        }
        let e = buf.epoch.take().expect("checked above");
        buf.sent.clear();
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

fn begin<C: Conduit>(
    ep: &mut Endpoint<C>,
    buf: &mut DeltaBuf,
    dst: GlobalPtr<u8>,
    to_window: bool,
) -> Result<(), OverlapError> {
    if buf.epoch.is_some() {
        return Err(OverlapError::EpochOpen);
    }
    let len = buf.len();
    let page = sys::page_size();
    let (peer, delta, whole_pct) = with(ep, |l, cx| {
        // Auto: the strip model's length for the buffer, between 4 and 16 pages
        // (seed 001: 4 to 5 pages amortise a delta's cost; much longer ones lose
        // the pipeline).
        let delta = l.delta.unwrap_or_else(|| {
            model::strip_len(l.cost(), &Decomp::Auto, len, page, 0).clamp(4 * page, 16 * page)
        });
        (cx.peer_segment(dst.addr()), delta, l.delta_whole)
    })?;
    if to_window && dst.offset % page != 0 {
        return Err(OverlapError::Unaligned {
            offset: dst.offset,
            page,
        });
    }
    let out_of_segment = |len: usize, seg_len: usize| OverlapError::OutOfSegment {
        offset: dst.offset,
        len,
        seg_len,
    };
    let (remote, header) = match peer {
        Some((base, seg_len)) if to_window => {
            // The header first (its buffer length says where the rest lies).
            if dst.offset.checked_add(page).is_none_or(|e| e > seg_len) {
                return Err(out_of_segment(page, seg_len));
            }
            let ctl = base.as_ptr() as usize + dst.offset;
            // SAFETY: the header page lies in the target's mapped segment (checked
            // just above), page-aligned; its words are accessed only through
            // `gex_sync::word`.
            let wlen = unsafe {
                gex_sync::word::load64(
                    (ctl + layer::WINDOW_LEN_WORD) as *const u8,
                    Ordering::Acquire,
                )
            } as usize;
            if wlen < len {
                // A window for shorter buffers, or none made there (0).
                return Err(OverlapError::OutOfBuffer {
                    offset: 0,
                    len,
                    buf_len: wlen,
                });
            }
            let whole = DeltaRecv::window_len(wlen);
            if dst.offset.checked_add(whole).is_none_or(|e| e > seg_len) {
                return Err(out_of_segment(whole, seg_len));
            }
            (Some(ctl + page), Some((ctl, ctl + arrivals_offset(wlen))))
        }
        Some((base, seg_len)) => {
            if dst.offset.checked_add(len).is_none_or(|e| e > seg_len) {
                return Err(out_of_segment(len, seg_len));
            }
            (Some(base.as_ptr() as usize + dst.offset), None)
        }
        None if to_window => return Err(OverlapError::Unmapped { rank: dst.rank }),
        // gex-rma checks the range at each put.
        None => (None, None),
    };
    wait_buf(ep, buf);
    let window = match header {
        Some((ctl, arrivals)) => {
            // The receiver must have received the last epoch before the shadow is
            // written again (a rendezvous: this waits for its `delta_recv`).
            // SAFETY: as above: words of the header.
            let end = unsafe { gex_sync::word::load32(ctl as *const u8, Ordering::Acquire) };
            let mut spins = 0u32;
            loop {
                // SAFETY: as above.
                let consumed = unsafe {
                    gex_sync::word::load32(
                        (ctl + layer::CONSUMED_WORD) as *const u8,
                        Ordering::Acquire,
                    )
                };
                if consumed == end {
                    break;
                }
                backoff(ep, &mut spins);
            }
            Some((ctl, arrivals, end.wrapping_add(1)))
        }
        None => None,
    };
    let key = Dest::Seg(dst.rank, dst.ep, dst.offset);
    buf.sent.clear();
    buf.epoch = Some(Epoch {
        dst,
        remote,
        full: buf.last != Some(key),
        delta: delta.div_ceil(page) * page,
        whole_pct,
        stats: DeltaStats::default(),
        misuse: None,
        window,
    });
    buf.last = None;
    Ok(())
}

/// Where a window's arrival words start: after the header page and the shadow
/// (rounded up to 64 bytes).
fn arrivals_offset(len: usize) -> usize {
    sys::page_size() + len.div_ceil(64) * 64
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

/// Hands `task` to the layer's mover, counted in flight for the layer and in `mine`.
fn queue<C: Conduit>(
    ep: &mut Endpoint<C>,
    task: Task,
    mine: &Arc<AtomicUsize>,
) -> Result<(), OverlapError> {
    let mine = mine.clone();
    with(ep, |l, _| {
        let all = l.inflight.clone();
        let tx = l.sender()?;
        all.fetch_add(1, Ordering::AcqRel);
        mine.fetch_add(1, Ordering::AcqRel);
        tx.send(task).map_err(|_| {
            all.fetch_sub(1, Ordering::AcqRel);
            mine.fetch_sub(1, Ordering::AcqRel);
            OverlapError::MoverGone
        })
    })?
}

/// Sends `set` to the open epoch's destination; the pages end in state `after`.
fn send_set<C: Conduit>(
    ep: &mut Endpoint<C>,
    buf: &mut DeltaBuf,
    set: &RangeSet,
    after: u32,
    inline: bool,
) -> Result<(), OverlapError> {
    let page = sys::page_size();
    let len = buf.len();
    let (dst, remote, delta, notify) = match &buf.epoch {
        Some(e) => (e.dst, e.remote, e.delta, e.window.map(|(_, a, k)| (a, k))),
        None => return Err(OverlapError::NoEpoch),
    };
    let shared = buf.buf.shared.clone();
    let region = &shared.region;
    for sp in spans(set, delta, page, len) {
        let (first, n) = (sp.off / page, (sp.end - sp.off).div_ceil(page));
        let bytes: usize = sp.pieces.iter().map(|p| p.1).sum();
        let runs = sp.pieces.len();
        if let (true, Some(base)) = (inline, remote) {
            // The epoch's last pieces, copied by this thread: `&mut buf` keeps every
            // other access to the buffer away, so nothing is claimed or protected
            // for the copy (no hand-off to the mover, no `mprotect` but the one an
            // OS-triggered buffer needs to see the next writes).
            layer::copy_inline(
                &shared,
                base,
                &sp.pieces,
                sp.off,
                sp.end - sp.off,
                after,
                notify,
            )
            .map_err(OverlapError::Os)?;
            if let Some(e) = &mut buf.epoch {
                e.stats.bytes += bytes;
                e.stats.runs += runs;
                e.stats.sends += 1;
            }
            continue;
        }
        region
            .table
            .claim_from(first, n, |s| s == READY || s == CLEAN)
            .map_err(|page| OverlapError::Overlapping { page })?;
        region.generation.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = shared.protect(sp.off, sp.end - sp.off, Prot::Read) {
            layer::retire_strip(&shared, sp.off, sp.end - sp.off, page);
            return Err(OverlapError::Os(e));
        }
        match remote {
            Some(base) => {
                let job = Job {
                    shared: shared.clone(),
                    dir: Dir::Put,
                    remote: base + sp.off,
                    off: sp.off,
                    len: sp.end - sp.off,
                    plan: model::StripPlan::equal(sp.end - sp.off, sp.end - sp.off),
                    lazy: false,
                    pieces: sp.pieces,
                    after,
                    done: Some(buf.inflight.clone()),
                    notify,
                };
                if let Err(e) = queue(ep, Task::Job(job), &buf.inflight) {
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
